"""Keeps each prepared claim's ``status.devices`` (this driver's entries) what
``claim_status`` says, and takes them back when the claim is unprepared.

It runs beside the kubelet calls, never in them: a prepare answers as soon as the claim's spec
and record are written, and the status follows (the kubelet's 45 s are not spent on an API
server that may be slow or away). It is woken (``changed``) once each call is over, its answer
sent (``plugin.add_plugin_servicers``'s ``answered``), so that not even its first steps share
the event loop with the answer. Each claim is written only when what it should say changed
(a prepare, an unprepare, a device's health), through server-side apply as the driver's own
field manager, so entries other drivers keep in the same claim are left alone. A claim whose
write is refused waits out a backoff of its own, like a slice; a claim the API server no
longer has (404, or 409 when one of its name was made again) is forgotten and not written again
while it stays prepared: its UID can never come back, and each retry would take a request from
the claims' lane that a prepare's claim read is waiting for (a pod force-deleted with its
claim, the kubelet's unprepare still to come).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kae_deviceplugin.apiserver.seam import RESOURCE_CLAIMS, ApiServer, JsonObject
from kae_deviceplugin.core.backoff import Backoff
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra.checkpoint import Checkpoint
from kae_deviceplugin.dra.claim_status import device_statuses, without_times
from kae_deviceplugin.dra.slice_devices import device_name
from kae_deviceplugin.errors import ApiError, clipped

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Claim:
    namespace: str
    name: str


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ClaimStatusWriter:
    """Writes claims' device status for one driver on one node."""

    def __init__(
        self,
        api: ApiServer,
        driver: str,
        inventory: Callable[[], Inventory],
        claims: Callable[[], Checkpoint],
        *,
        backoff: Backoff | None = None,
        totals: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self.api = api
        self.driver = driver
        self.inventory = inventory
        self.claims = claims
        self.totals = totals  # each function's queue total by PCI address (the grant's whole)
        self.backoff = backoff or Backoff()
        self.written: dict[str, list[JsonObject]] = {}  # by claim UID: what the API holds
        self._names: dict[str, _Claim] = {}  # by claim UID, kept until its entries are gone
        self._gone: set[str] = set()  # prepared claims the API server no longer has
        self.writes = 0
        self._wake = asyncio.Event()

    def changed(self) -> None:
        """A prepare, an unprepare or the inventory changed: look again."""
        self._wake.set()

    def _wanted(self) -> dict[str, list[JsonObject]]:
        devices = {device_name(d): d for d in self.inventory()}
        now, wanted, totals = _now(), {}, self.totals()
        prepared = self.claims().claims
        self._gone &= prepared.keys()  # unprepared at last: nothing left to skip
        for uid, claim in prepared.items():
            if uid in self._gone:
                continue
            self._names[uid] = _Claim(claim.namespace, claim.name)
            before = self.written.get(uid)
            wanted[uid] = device_statuses(self.driver, claim, devices, now, before, totals=totals)
        for uid in self.written.keys() - wanted.keys():  # unprepared: take our entries back
            wanted[uid] = []
        return wanted

    async def sync(self) -> int:
        """One pass; the writes made. A claim in backoff is left for a later pass."""
        writes = 0
        now = asyncio.get_running_loop().time()
        for uid, entries in self._wanted().items():
            if self.backoff.not_before(uid) <= now and not self._current(uid, entries):
                writes += await self._write(uid, entries, now)
        self.writes += writes
        return writes

    def _current(self, uid: str, entries: list[JsonObject]) -> bool:
        """The API holds ``entries`` already (conditions' times aside), as far as we know."""
        if uid not in self.written:
            return not entries  # nothing written, nothing to take back
        return without_times(self.written[uid]) == without_times(entries)

    async def _write(self, uid: str, entries: list[JsonObject], now: float) -> int:
        claim = self._names[uid]
        body: JsonObject = {
            "apiVersion": RESOURCE_CLAIMS.api_version,
            "kind": RESOURCE_CLAIMS.kind,
            "metadata": {"name": claim.name, "namespace": claim.namespace, "uid": uid},
            "status": {"devices": entries},
        }
        try:
            await self.api.apply_status(RESOURCE_CLAIMS, body)
        except ApiError as err:
            if err.status in (404, 409):  # gone, or re-created: this UID is never back
                self._forget(uid)
                if entries:
                    self._gone.add(uid)
                    log.info("claim %s/%s is gone from the API: its status is not written",
                             clipped(claim.namespace), clipped(claim.name))  # fmt: skip
                return 0
            delay = self.backoff.failed(uid, now, transient=err.status == 0)
            log.warning("status of claim %s/%s not written: %s; again in %.1f s",
                        clipped(claim.namespace), clipped(claim.name), err, delay)  # fmt: skip
            return 0
        self.backoff.succeeded(uid)
        if entries:
            self.written[uid] = entries
        else:
            self._forget(uid)
        return 1

    def _forget(self, uid: str) -> None:
        self.written.pop(uid, None)
        self._names.pop(uid, None)
        self.backoff.succeeded(uid)

    async def run(self) -> None:
        """Sync on every change, and when a claim's backoff ends; never raises but to stop."""
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            started = loop.time()
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not stop the node's claims being served
                log.exception("writing claims' device status failed")
            earliest = self.backoff.earliest(after=started)
            timeout = None if earliest is None else max(0.0, earliest - loop.time())
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass
