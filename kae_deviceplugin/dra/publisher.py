"""Keeps the node's ResourceSlices in the API equal to what the inventory says, and no more.

The informer (``slice_informer``) holds the API's copy, re-listed whenever its watch starts
again; ``pool_rules.plan`` says what to write; this loop writes it, one slice at a time, each
slice with a backoff of its own that only its own success clears, so neither a new inventory
nor a watch event can make a refused write come back sooner (a 403 from RBAC or an admission
policy, a 422 after an upgrade, a 429 from priority and fairness). Every request also takes a
token of the client's bucket (``apiserver.paced``), the bound under every path.

What the API server returns is compared with what was written: a field it drops silently
(its feature gate off) is logged as an error once and not re-written forever. Device taints
are the one such field the driver must act on: without them an unhealthy device would stay
allocatable while prepare refuses it, so from then on unhealthy devices are left out of the
slices instead (``dropped`` tells the slice builder).

A device that flaps (a driver unbinding and binding again, uevents every 100 ms) would cost a
write per flap, on every node where it happens. So while changes keep coming, a node writes at
most once per ``min_interval`` (0.5 s): a change within that time of the last write waits for
the rest of it, and then the newest inventory is published, the ones in between never are.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from kae_deviceplugin.apiserver.seam import RESOURCE_SLICES, ApiServer, JsonObject
from kae_deviceplugin.core.backoff import Backoff
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra import pool_rules
from kae_deviceplugin.dra.slice_informer import SliceInformer
from kae_deviceplugin.errors import ApiError

log = logging.getLogger(__name__)

MIN_INTERVAL = 0.5  # between writes while changes keep coming (see above)
TAINTS = "spec.devices[].taints"
# Slices of one inventory at one pool generation, given the fields the server drops.
Builder = Callable[[Inventory, int, frozenset[str]], Sequence[JsonObject]]


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
        backoff: Backoff | None = None,
    ) -> None:
        self.api = api
        self.build = build
        self.memory = pool_rules.Memory()
        self.writes = 0  # API writes made, for the benchmark and the tests
        self.backoff = backoff or Backoff()
        selector = {"spec.driver": driver, "spec.nodeName": node}
        self.informer = SliceInformer(api, selector, Backoff(rng=self.backoff.rng))
        self.informer.on_recovered = self.backoff.server_back
        self.min_interval = min_interval
        self._last_write = -math.inf  # loop time of the last reconcile that wrote
        self._failing: dict[str, str] = {}  # slice -> why its last write failed
        self._again = asyncio.Event()  # a reconcile found it must run again at once

    @property
    def generation(self) -> int:
        """The pool generation last written or found (0: nothing published yet)."""
        return self.memory.generation

    @property
    def dropped(self) -> frozenset[str]:
        return frozenset(self.memory.dropped)

    def problems(self) -> list[str]:
        """What keeps the API's pool from being current, for ``/readyz``."""
        found = [self.informer.problem] if self.informer.problem else []
        return found + [f"ResourceSlice {n} not written: {e}" for n, e in self._failing.items()]

    async def reconcile(self, inventory: Inventory) -> int:
        """One pass against the informer's copy; the writes made. A slice in backoff is left
        for a later pass."""
        found = map(pool_rules.generation_of, self.informer.slices.values())
        self.memory.generation = max([self.memory.generation, *found])
        plan = pool_rules.plan(
            self.informer.slices,
            lambda generation: self.build(inventory, generation, self.dropped),
            self.memory,
        )
        self._forget_unneeded(plan)
        if plan is None:
            return 0
        self.memory.generation = plan.generation
        writes = 0
        for name in plan.deletes:
            writes += await self._attempt(name, None)
        for body in plan.writes:
            writes += await self._attempt(body["metadata"]["name"], body)
        self.writes += writes
        if writes:
            log.info("published the pool at generation %d (%d writes)", plan.generation, writes)
        return writes

    def _forget_unneeded(self, plan: pool_rules.Plan | None) -> None:
        """A slice whose write failed and that the pool no longer needs written (the pool
        shrank, or is current without it) is no longer a problem for ``/readyz``."""
        needed = set() if plan is None else {b["metadata"]["name"] for b in plan.writes}
        needed |= set() if plan is None else set(plan.deletes)
        for name in [n for n in self._failing if n not in needed]:
            del self._failing[name]
            log.info("ResourceSlice %s is no longer needed: its failed write is forgotten", name)

    async def _attempt(self, name: str, body: JsonObject | None) -> int:
        """Write (or with no body, delete) one slice unless it is in backoff; 1 if written."""
        now = asyncio.get_running_loop().time()
        if self.backoff.not_before(name) > now:
            return 0
        try:
            if body is None:
                await self.api.delete(RESOURCE_SLICES, name)
                self.informer.deleted(name)
            else:
                self._stored(body, await self._send(body))
        except ApiError as err:
            if body is None and err.status == 404:  # already gone: what we wanted
                self.informer.deleted(name)
                return 0
            self._failed(name, err, now)
            return 0
        self.backoff.succeeded(name)
        if self._failing.pop(name, None) is not None:
            log.info("ResourceSlice %s written again", name)
        return 1

    async def _send(self, body: JsonObject) -> JsonObject:
        if "resourceVersion" in body["metadata"]:
            return await self.api.replace(RESOURCE_SLICES, body)
        return await self.api.create(RESOURCE_SLICES, body)

    def _stored(self, sent: JsonObject, read: JsonObject) -> None:
        name = sent["metadata"]["name"]
        self.informer.wrote(read)
        version = read.get("metadata", {}).get("resourceVersion")
        if version is not None:
            wrote = pool_rules.without_taint_times(pool_rules.content(sent))
            self.memory.written[name] = (str(version), wrote)
        for missing in pool_rules.newly_dropped(sent, read, self.memory.dropped):
            self.memory.dropped.add(missing)
            log.error("the API server did not keep %s of ResourceSlice %s (a feature gate off?)",
                      missing, name)  # fmt: skip
            if missing == TAINTS:
                log.error("unhealthy devices are left out of the pool from now on, so that no "
                          "claim is placed on a device that prepare would refuse")  # fmt: skip
                self._again.set()

    def _failed(self, name: str, err: ApiError, now: float) -> None:
        delay = self.backoff.failed(name, now, transient=err.status == 0)
        if self._failing.get(name) != str(err):
            log.warning("ResourceSlice %s not written: %s; retrying in %.1f s", name, err, delay)
        self._failing[name] = str(err)

    async def run(self, inventories: LatestValue[Inventory]) -> None:
        """Keep the informer running and reconcile whenever the inventory or the API changes."""
        watcher = asyncio.create_task(self.informer.run(), name="slice-informer")
        try:
            await self._follow(inventories)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    async def _follow(self, inventories: LatestValue[Inventory]) -> None:
        updates = inventories.updates()
        _version, latest = await anext(updates)
        pending: asyncio.Future[tuple[int, Inventory]] = asyncio.ensure_future(anext(updates))
        try:
            while True:
                await self.informer.synced.wait()  # a copy of the API's pool to compare with
                latest, pending = await _newest(latest, pending, updates)
                self.informer.changed.clear()
                self._again.clear()
                started = asyncio.get_running_loop().time()
                if await self.reconcile(latest):
                    self._last_write = asyncio.get_running_loop().time()
                await self._until_next(pending, started)
                await self._pace()
        finally:
            pending.cancel()

    async def _until_next(
        self, pending: asyncio.Future[tuple[int, Inventory]], started: float
    ) -> None:
        """Until a new inventory, a change in the API, or the end of the soonest backoff of a
        write the reconcile that ``started`` then had to leave."""
        waiters: list[asyncio.Future[Any]] = [
            pending,
            asyncio.ensure_future(self.informer.changed.wait()),
            asyncio.ensure_future(self._again.wait()),
        ]
        earliest = self.backoff.earliest(after=started)
        timeout = None if earliest is None else earliest - asyncio.get_running_loop().time()
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when cancelled: no waiter is left pending at loop close
            for waiter in waiters[1:]:
                waiter.cancel()

    async def _pace(self) -> None:
        """Hold a change that comes within ``min_interval`` of the last write (a flapping
        device) until that interval is over."""
        wait = self._last_write + self.min_interval - asyncio.get_running_loop().time()
        if wait > 0:
            await asyncio.sleep(wait)


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
