"""The slice publisher under the faults a control plane produces every day, on the in-memory
API server (requests counted per verb): refusals that persist while everything else keeps
waking the loop, watches that end with 410 Gone, break with garbage or end cleanly while
slices are deleted unseen, a server that drops device taints, and a multi-slice pool whose
change touches one slice."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import time
from collections.abc import Callable, Sequence

from kae_deviceplugin.apiserver.seam import RESOURCE_SLICES, JsonObject, Kind
from kae_deviceplugin.core.backoff import Backoff
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Health, Inventory
from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.publisher import TAINTS, SlicePublisher
from kae_deviceplugin.dra.slice_devices import DeviceOptions
from kae_deviceplugin.dra.slices import NodeRef, build_slices, slice_name
from kae_deviceplugin.errors import ApiError
from tests.dra.inventories import fixture_inventory
from tests.support.fake_apiserver import FakeApiServer

NODE = NodeRef("node-a", "6f1c1d2e-0000-4000-8000-000000000001")
DEADLINE = 10.0
FORBIDDEN = ApiError("resourceslices is forbidden", status=403, reason="Forbidden")


def build(inventory: Inventory, generation: int, dropped: frozenset[str]) -> Sequence[JsonObject]:
    """Taints on unhealthy devices unless the server drops them (then left out), as the front
    end's device options say."""
    options = DeviceOptions(taint_effect=None if TAINTS in dropped else "NoSchedule")
    totals = {d.pci_address: 256 for d in inventory}
    return build_slices(
        inventory, NODE, generation=generation, queues=totals, options=options
    ).slices


def unhealthy(inventory: Inventory, *indexes: int) -> Inventory:
    devices = list(inventory.devices)
    for index in indexes:
        devices[index] = dataclasses.replace(
            devices[index], health=Health.UNHEALTHY, reasons=("isolated",)
        )
    return Inventory(tuple(devices))


def big_inventory(count: int = 100) -> Inventory:
    """``count`` devices: two slices of 64 when taints may appear."""
    template = fixture_inventory("kunpeng920-2p").devices[0]
    return Inventory(
        tuple(
            dataclasses.replace(template, pci_address=f"0000:{i // 32:02x}:{i % 32:02x}.0")
            for i in range(count)
        )
    )


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(DEADLINE):
        while not condition():
            await asyncio.sleep(0.005)


class TimedApi(FakeApiServer):
    """The in-memory server, noting when each create was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.created_at: list[float] = []

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject:
        self.created_at.append(time.monotonic())
        return await super().create(kind, body)


def publisher_for(api: FakeApiServer, start: float = 0.1, cap: float = 0.8) -> SlicePublisher:
    backoff = Backoff(start=start, cap=cap, rng=random.Random(3))
    return SlicePublisher(api, DRIVER, NODE.name, build, backoff=backoff, min_interval=0.0)


async def running(
    publisher: SlicePublisher, inventories: LatestValue[Inventory]
) -> asyncio.Task[None]:
    return asyncio.create_task(publisher.run(inventories))


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_a_persistent_refusal_backs_off_whatever_wakes_the_loop() -> None:
    """Creates refused with 403 for 2 s while a new inventory is published and the watch
    fires every 10 ms: creates come at growing intervals (each gap at least 0.75 of its
    nominal 0.1, 0.2, 0.4, 0.8 s), about 5 in all, not hundreds; the pool is listed once; once
    the refusal is lifted, the pool is published; meanwhile ``problems`` names the refusal."""
    api = TimedApi()
    api.refuse["create"] = FORBIDDEN
    publisher = publisher_for(api)
    healthy = fixture_inventory("kunpeng920-2p")
    inventories = LatestValue(healthy)

    async def main() -> None:
        task = await running(publisher, inventories)
        try:
            end = time.monotonic() + 2.0
            for flip in itertools.count():
                if time.monotonic() > end:
                    break
                inventories.publish(unhealthy(healthy, 0) if flip % 2 else healthy)
                publisher.informer.changed.set()
                await asyncio.sleep(0.01)
            # /readyz names the slice refused and the API's reason, and nothing else is wrong.
            (problem,) = publisher.problems()
            assert problem.startswith("ResourceSlice ") and problem.endswith(
                " not written: resourceslices is forbidden"
            ), problem
            assert publisher.informer.problem is None
            del api.refuse["create"]
            await until(lambda: len(api.objects) == 1)
        finally:
            await stop(task)

    asyncio.run(main())
    gaps = [b - a for a, b in itertools.pairwise(api.created_at)]
    nominal = [min(0.8, 0.1 * 2**i) for i in range(len(gaps))]
    assert all(gap >= 0.75 * n - 0.01 for gap, n in zip(gaps, nominal, strict=False)), gaps
    assert len(api.created_at) <= 8, api.created_at
    assert api.calls["list"] == 1, api.calls


def test_a_refused_write_is_named_in_the_problems_until_it_succeeds() -> None:
    """While creates are refused, ``problems`` names the slice and the refusal; after, none."""
    api = FakeApiServer()
    api.refuse["create"] = FORBIDDEN
    publisher = publisher_for(api)

    async def main() -> None:
        task = await running(publisher, LatestValue(fixture_inventory("kunpeng920-2p")))
        try:
            await until(lambda: any("forbidden" in p for p in publisher.problems()))
            del api.refuse["create"]
            await until(lambda: not publisher.problems() and len(api.objects) == 1)
        finally:
            await stop(task)

    asyncio.run(main())


def _silently_delete_all(api: FakeApiServer) -> None:
    """Slices deleted with no watch event reaching us (they went while our watch was down)."""
    for key in [k for k in api.objects if k[0] == RESOURCE_SLICES.plural]:
        del api.objects[key]


def test_a_watch_ended_by_410_lists_again_and_repairs_what_it_missed() -> None:
    """The watch ends with 410 Gone; slices deleted while it was down (no event) are found by
    the new list and created again."""
    api = FakeApiServer()
    publisher = publisher_for(api)

    async def main() -> None:
        task = await running(publisher, LatestValue(fixture_inventory("kunpeng920-2p")))
        try:
            await until(lambda: len(api.objects) == 1 and publisher.informer.lists == 1)
            api.refuse["list"] = ApiError("too old resource version", status=410, reason="Gone")
            api.break_watches(ApiError("too old resource version", status=410, reason="Gone"))
            await until(lambda: publisher.informer.problem is not None)
            assert any("410" in p or "too old" in p for p in publisher.problems())
            _silently_delete_all(api)
            del api.refuse["list"]
            await until(lambda: len(api.objects) == 1)
            assert publisher.informer.problem is None
        finally:
            await stop(task)

    asyncio.run(main())


def test_a_garbage_watch_event_and_a_clean_end_each_list_again() -> None:
    """A stream that breaks with something other than an API error (an undecodable line) is
    no end of the watcher: it lists again; so does a stream the server ends cleanly. Each time,
    a wipe made while the watch was down is repaired."""
    api = FakeApiServer()
    publisher = publisher_for(api)

    async def main() -> None:
        task = await running(publisher, LatestValue(fixture_inventory("kunpeng920-2p")))
        try:
            await until(lambda: len(api.objects) == 1)
            for lists, cause in enumerate((ValueError("Expecting value: line 1"), None), 2):
                api.refuse["list"] = ApiError("unavailable", status=503)
                api.break_watches(cause)
                await until(lambda: publisher.informer.synced.is_set() is False)
                _silently_delete_all(api)
                del api.refuse["list"]
                await until(lambda: len(api.objects) == 1)
                assert publisher.informer.lists >= lists
        finally:
            await stop(task)

    asyncio.run(main())


def test_a_server_that_drops_taints_gets_unhealthy_devices_left_out() -> None:
    """Taints on, a device isolated, and the server drops spec.devices.taints: the driver
    notices on its first write and publishes the pool without that device, so no claim is
    placed on it; once it recovers it is published again."""
    api = FakeApiServer(drop=("spec.devices.taints",))
    publisher = publisher_for(api)
    healthy = fixture_inventory("kunpeng920-2p")
    inventories = LatestValue(unhealthy(healthy, 0))

    def published() -> int:
        return sum(len(s["spec"]["devices"]) for s in api.objects.values())

    async def main() -> None:
        task = await running(publisher, inventories)
        try:
            await until(lambda: published() == 5)
            assert TAINTS in publisher.dropped
            inventories.publish(healthy)
            await until(lambda: published() == 6)
        finally:
            await stop(task)

    asyncio.run(main())


def test_a_change_in_one_slice_of_two_is_one_write_at_the_same_generation() -> None:
    """100 devices in two slices: one device flips, one slice is replaced at the same
    generation; two devices in both slices flip, the generation goes up and both slices are
    written."""
    api = FakeApiServer()
    publisher = publisher_for(api)
    inventory = big_inventory()

    async def main() -> None:
        await publisher.informer.resync()
        assert await publisher.reconcile(inventory) == 2
        await publisher.informer.resync()
        assert await publisher.reconcile(unhealthy(inventory, 70)) == 1
        assert {s["spec"]["pool"]["generation"] for s in api.objects.values()} == {1}
        await publisher.informer.resync()
        assert await publisher.reconcile(unhealthy(inventory, 0, 70, 71)) == 2
        assert {s["spec"]["pool"]["generation"] for s in api.objects.values()} == {2}

    asyncio.run(main())
    assert api.writes == 5


def test_writes_that_failed_unanswered_go_at_once_when_the_watch_lists_again() -> None:
    """Replaces fail unanswered (the server away for writes) until their backoff nears its
    3.2 s step; when the server is back and the watch lists again, the write goes at once
    rather than after that step: only refusals keep their backoff."""
    api = FakeApiServer()
    publisher = publisher_for(api, start=0.05, cap=5.0)
    healthy = fixture_inventory("kunpeng920-2p")
    inventories = LatestValue(healthy)

    async def main() -> None:
        task = await running(publisher, inventories)
        try:
            await until(lambda: len(api.objects) == 1)
            api.refuse["update"] = ApiError("API server not reachable")  # no status
            inventories.publish(unhealthy(healthy, 0))
            [name] = [key[2] for key in api.objects]
            await until(lambda: publisher.backoff.failures(name) >= 7)
            del api.refuse["update"]
            back = time.monotonic()
            api.break_watches(None)  # the watch ends and lists again: the server answers
            await until(lambda: "taints" in str(next(iter(api.objects.values()))))
            assert time.monotonic() - back < 2.0
        finally:
            await stop(task)

    asyncio.run(main())


class RefusingOne(FakeApiServer):
    """The in-memory server refusing (403) every create of the slice named ``refused``."""

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused = refused

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject:
        if body["metadata"]["name"] == self.refused:
            self._maybe_fail("create")
            raise FORBIDDEN
        return await super().create(kind, body)


def test_a_failed_slice_the_pool_no_longer_needs_leaves_the_problems() -> None:
    """A pool of two slices whose second slice's create is refused: ``problems`` names it.
    The inventory then shrinks to one slice's worth: the second slice is no longer wanted, so
    it leaves ``problems`` (and /readyz) at once, while its create is still refused."""
    second = slice_name(NODE.name, 1)
    api = RefusingOne(second)
    publisher = publisher_for(api)
    inventories = LatestValue(big_inventory(100))

    async def main() -> None:
        task = await running(publisher, inventories)
        try:
            await until(lambda: any(second in p for p in publisher.problems()))
            inventories.publish(big_inventory(40))
            await until(lambda: not publisher.problems())
            assert len(api.objects) == 1 and api.refused == second
        finally:
            await stop(task)

    asyncio.run(main())
