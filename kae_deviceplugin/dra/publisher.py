"""Keeps the node's ResourceSlices in the API equal to what the inventory says, and no more.

One reconcile compares the slices the API holds (listed by ``spec.driver`` and ``spec.nodeName``)
with the ones the current inventory makes: exactly with what this publisher last wrote while the
server still holds that version, else field by field both ways (the server's copy may add only
the taints' ``timeAdded``: a lifted taint is a removal). Nothing is written when they agree,
so a driver at rest costs the API server nothing; otherwise the pool's generation goes up by one
and only the slices that differ are created, replaced or deleted, each standing taint keeping
the ``timeAdded`` the server gave it. A watch on the same selector wakes the loop when someone
else changes or deletes a slice (the kubelet wipes a node's slices at its start and 30 s after
losing the driver), and the next reconcile writes them back. What the API server returns is
compared with what was written: a field it drops silently (its feature gate off) is logged as an
error once, not re-written forever.

A device that flaps (a driver unbinding and binding again, uevents every 100 ms) would cost a
write per flap, on every node where it happens. So while changes keep coming, a node writes at
most once per ``min_interval`` (0.5 s): a change within that time of the last write waits for
the rest of it, and then the newest inventory is published, the ones in between never are. A
lone change after a quiet spell goes at once; a held one waits at most 0.5 s more, so a health
change still reaches the API within a second.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from kae_deviceplugin.apiserver.seam import RESOURCE_SLICES, ApiServer, JsonObject
from kae_deviceplugin.core.broadcast import LatestValue, wait_until_set
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.errors import ApiError

log = logging.getLogger(__name__)

RETRY_START = 0.2  # after a failed reconcile or a broken watch, doubled up to RETRY_CAP
RETRY_CAP = 10.0
MIN_INTERVAL = 0.5  # between writes while changes keep coming (see above)
# Slices of one inventory at one pool generation (dra.slices.build_slices, bound to the node).
Builder = Callable[[Inventory, int], Sequence[JsonObject]]


def dropped_fields(written: Any, read: Any, path: str = "") -> list[str]:
    """Paths of what ``written`` holds and ``read`` lacks or holds otherwise (read may add)."""
    if isinstance(written, Mapping) and isinstance(read, Mapping):
        return [
            missing
            for key, value in written.items()
            for missing in (
                dropped_fields(value, read[key], f"{path}.{key}")
                if key in read
                else [f"{path}.{key}"]
            )
        ]
    if isinstance(written, list) and isinstance(read, list) and len(written) == len(read):
        return [m for i, (w, r) in enumerate(zip(written, read, strict=True)) for m in
                dropped_fields(w, r, f"{path}[{i}]")]  # fmt: skip
    return [] if written == read else [path or "."]


def field_of(path: str) -> str:
    """A dropped path as a field, the same for every device: ``spec.devices[].capacity``."""
    return re.sub(r"\[\d+\]", "[]", path.lstrip("."))


def _content(slice_: Mapping[str, Any]) -> JsonObject:
    """A slice's spec without the pool generation: what a change of the inventory changes."""
    spec = dict(slice_["spec"])
    spec["pool"] = {k: v for k, v in spec["pool"].items() if k != "generation"}
    return {"spec": spec, "owners": slice_["metadata"].get("ownerReferences")}


def keep_taint_times(body: JsonObject, old: Mapping[str, Any]) -> JsonObject:
    """``body`` with the ``timeAdded`` the server stamped on each taint ``old`` already had
    (same device, key, value and effect). The server stamps a taint written without one, so
    re-sending a slice for another device's change would otherwise restart the clock of every
    standing taint, and with it a NoExecute toleration's ``tolerationSeconds``."""
    times = {
        (device.get("name"), t.get("key"), t.get("value"), t.get("effect")): t["timeAdded"]
        for device in old.get("spec", {}).get("devices", [])
        for t in device.get("taints", [])
        if "timeAdded" in t
    }
    if not times:
        return body
    devices = []
    for device in body["spec"]["devices"]:
        taints = [
            {**t, "timeAdded": times[key]} if (key := _taint_key(device, t)) in times else t
            for t in device.get("taints", [])
        ]
        devices.append({**device, "taints": taints} if taints else device)
    return {**body, "spec": {**body["spec"], "devices": devices}}


def _taint_key(device: Mapping[str, Any], taint: Mapping[str, Any]) -> tuple[Any, ...]:
    return (device.get("name"), taint.get("key"), taint.get("value"), taint.get("effect"))


def _without_taint_times(content: JsonObject) -> JsonObject:
    """A slice's content without the ``timeAdded`` the server stamps on each taint."""
    devices = [
        {**d, "taints": [{k: v for k, v in t.items() if k != "timeAdded"} for t in d["taints"]]}
        if d.get("taints")
        else d
        for d in content["spec"].get("devices", [])
    ]
    return {**content, "spec": {**content["spec"], "devices": devices}}


class SlicePublisher:
    """Reconciles one node's pool of ResourceSlices with the inventory it is given."""

    def __init__(
        self,
        api: ApiServer,
        driver: str,
        node: str,
        build: Builder,
        *,
        min_interval: float = MIN_INTERVAL,
    ) -> None:
        self.api = api
        self.selector = {"spec.driver": driver, "spec.nodeName": node}
        self.build = build
        self.generation = 0  # the pool generation last written or found
        self.writes = 0  # API writes made, for the benchmark and the tests
        self._reported: set[str] = set()  # dropped fields already logged
        # Per slice we wrote: the resourceVersion the server gave it and what we wrote. While
        # the server still holds that version, "agrees" is an exact comparison with it, so a
        # removal (a lifted taint) is a change though the server's copy holds more than we sent.
        self._written: dict[str, tuple[str, JsonObject]] = {}
        self.wake = asyncio.Event()
        self.min_interval = min_interval
        self._last_write = -math.inf  # loop time of the last reconcile that wrote

    async def reconcile(self, inventory: Inventory) -> int:
        """Make the API's slices those of ``inventory``; the number of writes it took."""
        existing = {
            s["metadata"]["name"]: s for s in await self.api.list(RESOURCE_SLICES, self.selector)
        }
        generations = [s["spec"]["pool"].get("generation", 0) for s in existing.values()]
        self.generation = max([self.generation, *generations])
        wanted = self.build(inventory, self.generation)
        if self._agrees(existing, wanted) and len(set(generations)) == 1:
            return 0
        self.generation += 1
        wanted = self.build(inventory, self.generation)
        writes = 0
        for body in wanted:
            name = body["metadata"]["name"]
            old = existing.pop(name, None)
            if old is None:
                read = await self.api.create(RESOURCE_SLICES, body)
            else:
                metadata = {
                    **body["metadata"],
                    "resourceVersion": old["metadata"]["resourceVersion"],
                }
                sent = keep_taint_times({**body, "metadata": metadata}, old)
                read = await self.api.replace(RESOURCE_SLICES, sent)
            self._check(body, read)
            version = read.get("metadata", {}).get("resourceVersion")
            if version is not None:
                self._written[name] = (str(version), _content(body))
            writes += 1
        for name in existing:  # left over from a larger pool
            await self.api.delete(RESOURCE_SLICES, name)
            writes += 1
        self.writes += writes
        log.info("published %d ResourceSlice(s) at pool generation %d (%d writes)",
                 len(wanted), self.generation, writes)  # fmt: skip
        return writes

    def _agrees(self, existing: Mapping[str, JsonObject], wanted: Sequence[JsonObject]) -> bool:
        if set(existing) != {body["metadata"]["name"] for body in wanted}:
            return False
        return all(self._same(body, existing[body["metadata"]["name"]]) for body in wanted)

    def _same(self, body: JsonObject, stored: JsonObject) -> bool:
        written = self._written.get(body["metadata"]["name"])
        if written is not None and written[0] == stored["metadata"].get("resourceVersion"):
            return written[1] == _content(body)
        # Found, not ours (a restart, or someone else wrote it): what we would write must be
        # there (a field the server does not keep, reported once, is no reason to write again),
        # and nothing more but the taints' timeAdded: a lifted taint, or sharing turned off
        # across a restart, is a removal. A default the server adds costs one write after a
        # restart, after which the exact comparison above takes over.
        if dropped_fields(_without_taint_times(_content(stored)), _content(body)):
            return False
        return all(
            field_of(path) in self._reported
            for path in dropped_fields(_content(body), _content(stored))
        )

    def _check(self, written: JsonObject, read: JsonObject) -> None:
        """Log, once each, fields the API server did not keep (e.g. a feature gate is off)."""
        for path in dropped_fields(written["spec"], read.get("spec", {}), "spec"):
            field = field_of(path)
            if field not in self._reported:
                self._reported.add(field)
                log.error(
                    "the API server did not keep %s of ResourceSlice %s (a feature gate off?)",
                    field,
                    written["metadata"]["name"],
                )

    async def run(self, inventories: LatestValue[Inventory]) -> None:
        """Reconcile on every new inventory and whenever the watch sees our slices change."""
        watcher = asyncio.create_task(self._watch())
        try:
            await self._follow(inventories)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    async def _follow(self, inventories: LatestValue[Inventory]) -> None:
        delay = RETRY_START
        updates = inventories.updates()
        _version, latest = await anext(updates)  # the current one, so it is not reconciled twice
        pending: asyncio.Future[tuple[int, Inventory]] = asyncio.ensure_future(anext(updates))
        try:
            while True:
                latest, pending = await _newest(latest, pending, updates)
                try:
                    if await self.reconcile(latest):
                        self._last_write = asyncio.get_running_loop().time()
                    delay = RETRY_START
                except ApiError as err:
                    log.warning("ResourceSlices not published: %s; retrying in %.1f s", err, delay)
                    await wait_until_set(self.wake, delay)
                    delay = min(delay * 2, RETRY_CAP)
                    continue
                await self._until_woken(pending)
                await self._pace()
                # Cleared only now: the next reconcile lists after this, so it sees whatever
                # woke us meanwhile.
                self.wake.clear()
        finally:
            pending.cancel()

    async def _until_woken(self, pending: asyncio.Future[tuple[int, Inventory]]) -> None:
        """Until a new inventory is published or the watch wakes us."""
        wake = asyncio.ensure_future(self.wake.wait())
        waiters: list[asyncio.Future[Any]] = [pending, wake]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when cancelled: no waiter is left pending at loop close
            wake.cancel()

    async def _pace(self) -> None:
        """Hold a change that comes within ``min_interval`` of the last write (a flapping
        device) until that interval is over."""
        wait = self._last_write + self.min_interval - asyncio.get_running_loop().time()
        if wait > 0:
            await asyncio.sleep(wait)

    async def _watch(self) -> None:
        """Wake the loop on any event of our slices that we did not cause ourselves."""
        delay = RETRY_START
        while True:
            try:
                async for event, obj in self.api.watch(RESOURCE_SLICES, self.selector):
                    generation = obj.get("spec", {}).get("pool", {}).get("generation")
                    if event == "DELETED" or generation != self.generation:
                        self.wake.set()
                delay = RETRY_START
            except ApiError as err:
                log.warning("watch of ResourceSlices broke: %s; again in %.1f s", err, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_CAP)


async def _newest(
    latest: Inventory,
    pending: asyncio.Future[tuple[int, Inventory]],
    updates: AsyncIterator[tuple[int, Inventory]],
) -> tuple[Inventory, asyncio.Future[tuple[int, Inventory]]]:
    """The newest inventory published so far and a fresh read of the next one; ``latest`` if
    nothing was published since."""
    while pending.done():
        _version, latest = pending.result()
        pending = asyncio.ensure_future(anext(updates))
        # The fresh read runs once here: it is done at once when more was published meanwhile.
        await asyncio.sleep(0)
    return latest, pending
