"""The slice publisher on its own, against the in-memory API server of tests/support: nothing is
written at rest, one change costs one write per changed slice and one generation, a wipe by
someone else is repaired from the watch, a field the server drops is logged once, failures retry,
and a flapping device costs at most one write per interval, the newest state last."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Sequence

import pytest

from kae_deviceplugin.apiserver.seam import RESOURCE_SLICES, JsonObject, Kind
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Health, Inventory
from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.pool_rules import dropped_fields, newly_dropped
from kae_deviceplugin.dra.publisher import SlicePublisher
from kae_deviceplugin.dra.slice_devices import DeviceOptions
from kae_deviceplugin.dra.slices import DEFAULT_OPTIONS, NodeRef, build_slices
from tests.dra.inventories import fixture_inventory
from tests.support.fake_apiserver import FakeApiServer

NODE = NodeRef("node-a", "6f1c1d2e-0000-4000-8000-000000000001")
DEADLINE = 10.0


def builder(
    queues: int = 256, options: DeviceOptions = DEFAULT_OPTIONS
) -> Callable[[Inventory, int, frozenset[str]], Sequence[JsonObject]]:
    def build(
        inventory: Inventory, generation: int, dropped: frozenset[str]
    ) -> Sequence[JsonObject]:
        totals = {d.pci_address: queues for d in inventory}
        plan = build_slices(inventory, NODE, generation=generation, queues=totals, options=options)
        return plan.slices

    return build


def unhealthy_first(inventory: Inventory, index: int = 0) -> Inventory:
    devices = list(inventory.devices)
    devices[index] = dataclasses.replace(
        devices[index], health=Health.UNHEALTHY, reasons=("isolated",)
    )
    return Inventory(tuple(devices))


def taints(stored: JsonObject) -> dict[str, list[dict[str, str]]]:
    """Device name -> its taints, for the devices that have any."""
    return {d["name"]: d["taints"] for d in stored["spec"]["devices"] if d.get("taints")}


async def reconciled(publisher: SlicePublisher, inventory: Inventory) -> int:
    """One reconcile against what the API holds now (as after a fresh list)."""
    await publisher.informer.resync()
    return await publisher.reconcile(inventory)


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(DEADLINE):
        while not condition():
            await asyncio.sleep(0.005)


def test_a_pool_is_written_once_and_not_again_at_rest() -> None:
    """The first reconcile creates the slice; the same inventory again writes nothing."""
    api = FakeApiServer()
    publisher = SlicePublisher(api, DRIVER, NODE.name, builder())
    inventory = fixture_inventory("kunpeng920-2p")

    async def main() -> None:
        assert await reconciled(publisher, inventory) == 1
        assert await reconciled(publisher, inventory) == 0
        [stored] = await api.list(RESOURCE_SLICES, {"spec.nodeName": NODE.name})
        assert stored["spec"]["pool"] == {
            "name": NODE.name,
            "generation": 1,
            "resourceSliceCount": 1,
        }
        assert len(stored["spec"]["devices"]) == 6

    asyncio.run(main())
    assert api.writes == 1


def test_a_change_in_one_slice_is_one_write_at_the_same_generation() -> None:
    """A device turning unhealthy (left out untainted) replaces the pool's one slice in one
    write: a single write is atomic for every reader, so the generation stays (the pool's
    generation rules ask a bump only when more than one slice changes)."""
    api = FakeApiServer()
    publisher = SlicePublisher(api, DRIVER, NODE.name, builder())
    inventory = fixture_inventory("kunpeng920-2p")

    async def main() -> None:
        await reconciled(publisher, inventory)
        assert await reconciled(publisher, unhealthy_first(inventory)) == 1
        [stored] = await api.list(RESOURCE_SLICES, {"spec.driver": DRIVER})
        assert stored["spec"]["pool"]["generation"] == 1
        assert len(stored["spec"]["devices"]) == 5

    asyncio.run(main())


def test_a_restarted_publisher_adopts_an_equal_pool_and_replaces_a_stale_one() -> None:
    """A new publisher (a driver restart) writes nothing for equal slices and takes over the
    generation it finds; a different one-slice pool is one replace at that generation."""
    api = FakeApiServer()
    inventory = fixture_inventory("kunpeng920-2p")

    async def main() -> None:
        await reconciled(SlicePublisher(api, DRIVER, NODE.name, builder()), inventory)
        api.objects[next(iter(api.objects))]["spec"]["pool"]["generation"] = 7  # an older run
        second = SlicePublisher(api, DRIVER, NODE.name, builder())
        assert await reconciled(second, unhealthy_first(inventory)) == 1
        again = SlicePublisher(api, DRIVER, NODE.name, builder())
        assert await reconciled(again, unhealthy_first(inventory)) == 0
        assert again.generation == 7
        [stored] = api.objects.values()
        assert len(stored["spec"]["devices"]) == 5

    asyncio.run(main())


def test_a_shrinking_pool_deletes_the_slices_it_no_longer_needs() -> None:
    """200 devices take two slices; back to 6, the second is deleted."""
    api = FakeApiServer()
    publisher = SlicePublisher(api, DRIVER, NODE.name, builder())
    small = fixture_inventory("kunpeng920-2p")
    template = small.devices[0]
    big = Inventory(
        tuple(
            dataclasses.replace(template, pci_address=f"0000:{i // 32:02x}:{i % 32:02x}.0")
            for i in range(200)
        )
    )

    async def main() -> None:
        assert await reconciled(publisher, big) == 2
        assert await reconciled(publisher, small) == 2  # one replaced, one deleted
        stored = await api.list(RESOURCE_SLICES, {"spec.driver": DRIVER})
        assert [s["spec"]["pool"]["resourceSliceCount"] for s in stored] == [1]

    asyncio.run(main())


def test_slices_wiped_by_someone_else_come_back_from_the_watch() -> None:
    """The kubelet deletes the node's slices: the watch wakes the loop and they are re-created."""
    api = FakeApiServer()
    publisher = SlicePublisher(api, DRIVER, NODE.name, builder())
    inventories = LatestValue(fixture_inventory("kunpeng920-2p"))

    async def main() -> None:
        task = asyncio.create_task(publisher.run(inventories))
        try:
            await until(lambda: len(api.objects) == 1)
            api.wipe(RESOURCE_SLICES)
            await until(lambda: len(api.objects) == 1)
            [stored] = api.objects.values()
            assert stored["spec"]["pool"]["generation"] == 2
            inventories.publish(unhealthy_first(inventories.value))
            await until(lambda: devices_published(api) == 5)
            assert publisher.generation == 2  # one slice changed: the same generation
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())


def test_a_field_the_server_drops_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """A server without the gate of a field keeps the rest: one error line names the field,
    and its absence is no reason to write the same slice again."""
    api = FakeApiServer(drop=("spec.devices.capacity",))
    shared = DeviceOptions(shared_engines=frozenset({"zip"}))  # capacity only on shares
    publisher = SlicePublisher(api, DRIVER, NODE.name, builder(options=shared))
    inventory = fixture_inventory("kunpeng920-2p")

    async def main() -> None:
        await reconciled(publisher, inventory)
        assert await reconciled(publisher, inventory) == 0
        await reconciled(publisher, unhealthy_first(inventory))

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "spec.devices[].capacity" in errors[0], errors


def test_dropped_fields_names_only_what_was_written_and_lost() -> None:
    """Added fields do not count; a missing or changed one is named by its path."""
    written = {"a": {"b": 1, "c": [{"d": 2}]}}
    assert dropped_fields(written, {"a": {"b": 1, "c": [{"d": 2, "e": 3}]}, "z": 0}) == []
    assert dropped_fields(written, {"a": {"c": [{"d": 3}]}}) == [".a.b", ".a.c[0].d"]


def test_a_health_flip_taints_the_device_with_one_write_and_recovery_lifts_it() -> None:
    """With taints on, the isolated device stays in the slice and gains the unhealthy taint
    (its reason, the effect asked) in one write; recovery is one more write that lifts it; the
    device count never changes, nor the generation of the one-slice pool."""
    api = FakeApiServer()
    options = DeviceOptions(taint_effect="NoSchedule")
    publisher = SlicePublisher(api, DRIVER, NODE.name, builder(options=options))
    healthy = fixture_inventory("kunpeng920-2p")
    tainted_name = f"{healthy.devices[0].engine}-"  # the first device's name starts so

    async def main() -> None:
        assert await reconciled(publisher, healthy) == 1
        assert await reconciled(publisher, unhealthy_first(healthy)) == 1
        [stored] = await api.list(RESOURCE_SLICES, {"spec.driver": DRIVER})
        assert len(stored["spec"]["devices"]) == 6
        [(name, [taint])] = taints(stored).items()
        assert name.startswith(tainted_name)
        assert {k: taint[k] for k in ("key", "value", "effect")} == {
            "key": "kae.openfuyao.com/unhealthy",
            "value": "isolated",
            "effect": "NoSchedule",
        }
        assert await reconciled(publisher, healthy) == 1
        [stored] = await api.list(RESOURCE_SLICES, {"spec.driver": DRIVER})
        assert taints(stored) == {} and stored["spec"]["pool"]["generation"] == 1

    asyncio.run(main())
    assert api.writes == 3


def test_a_flip_seen_through_the_loop_is_one_write() -> None:
    """The running publisher, handed an inventory with one device isolated, writes once (its
    own write's watch event wakes nothing more) and the taint is in the API."""
    api = FakeApiServer()
    options = DeviceOptions(taint_effect="NoExecute")
    publisher = SlicePublisher(api, DRIVER, NODE.name, builder(options=options))
    inventories = LatestValue(fixture_inventory("kunpeng920-2p"))

    async def main() -> None:
        task = asyncio.create_task(publisher.run(inventories))
        try:
            await until(lambda: publisher.generation == 1)
            inventories.publish(unhealthy_first(inventories.value))
            await until(lambda: api.writes == 2)
            assert await reconciled(publisher, inventories.value) == 0
            [stored] = api.objects.values()
            assert [t[0]["effect"] for t in taints(stored).values()] == ["NoExecute"]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert api.writes == 2

    asyncio.run(main())


def test_a_standing_taint_keeps_its_time_when_another_device_flips() -> None:
    """The server stamps timeAdded on a new taint; re-sending the slice for a second device
    sends the first taint's stamp back, so its clock (and a NoExecute toleration's seconds)
    does not restart."""
    api = FakeApiServer()
    publisher = SlicePublisher(
        api, DRIVER, NODE.name, builder(options=DeviceOptions(taint_effect="NoExecute"))
    )
    inventory = fixture_inventory("kunpeng920-2p")

    async def main() -> None:
        await reconciled(publisher, unhealthy_first(inventory))
        [stored] = api.objects.values()
        [(first, [taint])] = taints(stored).items()
        taint["timeAdded"] = "2020-01-01T00:00:00Z"  # stamped long ago
        both = unhealthy_first(unhealthy_first(inventory), 1)
        assert await reconciled(publisher, both) == 1
        [stored] = api.objects.values()
        times = {name: t[0]["timeAdded"] for name, t in taints(stored).items()}
        assert times[first] == "2020-01-01T00:00:00Z"
        assert len(times) == 2 and all(times.values())

    asyncio.run(main())


def test_a_restarted_publisher_lifts_a_taint_it_did_not_write() -> None:
    """A new publisher (no memory of its writes) finds the slice tainted and the device
    recovered: the taint alone is reason enough for one write."""
    api = FakeApiServer()
    build = builder(options=DeviceOptions(taint_effect="NoSchedule"))
    inventory = fixture_inventory("kunpeng920-2p")

    async def main() -> None:
        await reconciled(SlicePublisher(api, DRIVER, NODE.name, build), unhealthy_first(inventory))
        again = SlicePublisher(api, DRIVER, NODE.name, build)
        assert await reconciled(again, unhealthy_first(inventory)) == 0
        assert await reconciled(again, inventory) == 1
        [stored] = api.objects.values()
        assert taints(stored) == {}

    asyncio.run(main())


def test_sharing_turned_off_across_a_restart_is_written() -> None:
    """A new publisher without sharing finds slices published with it: the server's copy holds
    more than it would write (allowMultipleAllocations, a request policy), so it writes once,
    then rests."""
    api = FakeApiServer()
    inventory = fixture_inventory("kunpeng920-2p")
    shared = builder(options=DeviceOptions(shared_engines=frozenset({"zip"})))

    async def main() -> None:
        await reconciled(SlicePublisher(api, DRIVER, NODE.name, shared), inventory)
        again = SlicePublisher(api, DRIVER, NODE.name, builder())
        assert await reconciled(again, inventory) == 1
        assert await reconciled(again, inventory) == 0
        [stored] = api.objects.values()
        assert not any("allowMultipleAllocations" in d for d in stored["spec"]["devices"])

    asyncio.run(main())


class TimedApi(FakeApiServer):
    """The in-memory server, noting when each replace was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.replaced_at: list[float] = []

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject:
        self.replaced_at.append(time.monotonic())
        return await super().replace(kind, body)


def devices_published(api: FakeApiServer) -> int:
    [stored] = api.objects.values()
    return len(stored["spec"]["devices"])


def test_a_flapping_device_costs_one_write_per_interval_and_the_newest_state_wins() -> None:
    """A device flipping every 20 ms for a second: the writes come at least ``min_interval``
    apart (about 1 s / 0.2 s of them, not 50), and the slice ends as the last inventory."""
    api = TimedApi()
    interval = 0.2
    publisher = SlicePublisher(api, DRIVER, NODE.name, builder(), min_interval=interval)
    healthy = fixture_inventory("kunpeng920-2p")
    inventories = LatestValue(healthy)

    async def main() -> None:
        task = asyncio.create_task(publisher.run(inventories))
        try:
            await until(lambda: len(api.objects) == 1)
            for flip in range(51):  # ends on the unhealthy one
                inventories.publish(unhealthy_first(healthy) if flip % 2 == 0 else healthy)
                await asyncio.sleep(0.02)
            await until(lambda: devices_published(api) == 5)
            await asyncio.sleep(interval * 2)  # nothing more to write: no further replace
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    started = time.monotonic()
    asyncio.run(main())
    elapsed = time.monotonic() - started
    gaps = [b - a for a, b in itertools.pairwise(api.replaced_at)]
    assert all(gap >= interval - 1e-3 for gap in gaps), gaps
    assert 2 <= len(api.replaced_at) <= elapsed / interval + 1, api.replaced_at
    assert devices_published(api) == 5


def test_a_lone_change_after_a_quiet_spell_is_not_held() -> None:
    """Only a change that follows a write within ``min_interval`` waits: one that comes after a
    longer quiet spell is written at once."""
    api = TimedApi()
    interval = 0.5
    publisher = SlicePublisher(api, DRIVER, NODE.name, builder(), min_interval=interval)
    inventories = LatestValue(fixture_inventory("kunpeng920-2p"))

    async def main() -> float:
        task = asyncio.create_task(publisher.run(inventories))
        try:
            await until(lambda: len(api.objects) == 1)
            await asyncio.sleep(interval + 0.1)
            published = time.monotonic()
            inventories.publish(unhealthy_first(inventories.value))
            await until(lambda: len(api.replaced_at) == 1)
            return api.replaced_at[0] - published
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    assert asyncio.run(main()) < interval


@pytest.mark.parametrize("read_back", ["null", "absent"])
def test_an_empty_pool_read_back_without_devices_is_neither_dropped_nor_rewritten(
    read_back: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An empty pool (the runtime applies no CDI) is one slice with ``devices: []``. A 1.34 API
    server returns it as ``null`` (seen on the 1.34.4 cell: the driver then logged that the
    server did not keep spec.devices and, restarted, failed every reconcile with a TypeError),
    1.37 leaves the key out: neither is a dropped field, and a restarted publisher adopts the
    slice without a write."""
    api = FakeApiServer()
    empty = Inventory()

    def as_the_server_keeps_it() -> None:
        for stored in api.objects.values():
            if read_back == "null":
                stored["spec"]["devices"] = None
            else:
                del stored["spec"]["devices"]

    async def main() -> None:
        first = SlicePublisher(api, DRIVER, NODE.name, builder())
        assert await reconciled(first, empty) == 1
        as_the_server_keeps_it()
        assert await reconciled(first, empty) == 0
        restarted = SlicePublisher(api, DRIVER, NODE.name, builder())
        assert await reconciled(restarted, empty) == 0
        assert await reconciled(restarted, fixture_inventory("kunpeng920-2p")) == 1

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert api.writes == 2


def test_newly_dropped_takes_null_or_absent_devices_as_the_empty_list_written() -> None:
    """What a server returns for an empty pool is what was written."""
    written = {"spec": {"devices": [], "driver": DRIVER}}
    for read in ({"spec": {"devices": None, "driver": DRIVER}}, {"spec": {"driver": DRIVER}}):
        assert newly_dropped(written, read, ()) == []
    assert newly_dropped(written, {"spec": {}}, ()) == ["spec.driver"]
