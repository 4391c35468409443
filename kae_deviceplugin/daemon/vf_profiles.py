"""Bring each PF to its VF profile (``engines.<name>.vfs``), drain-safe as the kernel is.

It sits between the scan loop and the front end's reconcile, in both modes. On every reconcile
(at start, on a changed inventory, on a reloaded profile) and, while a change waits, on the scan
tick with backoff, it plans each PF (:mod:`kae_deviceplugin.core.vf_plan`) and, for the PFs that
can change now:

1. takes their VFs out of service: the front end is handed the inventory without them (the
   device plugin's ListAndWatch drops them, DRA leaves them out of the slices);
2. after a short grace (an allocation the kubelet began on the old list is recorded by then),
   asks again who holds what: a pod given a VF between the plan and step 1 keeps it, and its
   PF waits;
3. writes ``sriov_numvfs`` (through 0 from one nonzero count to another, as the kernel demands)
   on a worker thread, since the kernel probes the new VFs inside the write;
4. asks the scan loop for a full rescan, which serves the new set through the usual path.

A PF held by a pod, or with queues of a VF open, or whose holders are unknown stays as it is and
is reported pending with its holders; a failed write (EBUSY, ERANGE, EINVAL, EROFS) leaves the
node serving what it has, logged once in one line, and is tried again with a long backoff.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.core.backoff import Backoff
from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.model import Function, Inventory
from kae_deviceplugin.core.vf_plan import QUEUES_PER_ENGINE, Holders, Reason, VfChange, plan
from kae_deviceplugin.core.views import VfProfile
from kae_deviceplugin.daemon.vf_holders import HoldersSource
from kae_deviceplugin.discovery.sriov import pf_function_dir, read_pfs

log = logging.getLogger(__name__)

Serve = Callable[[Inventory, Settings], Awaitable[None]]
# (PF address, count) -> None; raises OSError with the kernel's errno.
VfWriter = Callable[[str, int], None]
# After the VFs are withdrawn, how long before holders are asked again: an Allocate (or a
# NodePrepareResources) the kubelet began on the old list is recorded by then.
WITHDRAW_GRACE = 2.0
PENDING_RETRY = (2.0, 30.0)  # a waiting PF is planned again after 2 s, then up to every 30 s
FAILED_RETRY = (60.0, 3600.0)  # a failed write is tried again after a minute, at most hourly


def sysfs_writer(sysfs_root: Path) -> VfWriter:
    """Write ``<sysfs>/bus/pci/devices/<pf>/sriov_numvfs`` with one write(2), as ``echo`` does."""

    def write(pf: str, count: int) -> None:
        path = os.path.join(pf_function_dir(str(sysfs_root), pf), "sriov_numvfs")
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, f"{count}\n".encode())
        finally:
            os.close(fd)

    return write


def profiles_of(settings: Settings) -> dict[str, VfProfile]:
    """The engines with a VF profile set, and their profiles."""
    found = {e.name: settings.engine(e.name).vfs for e in ENGINES}
    return {name: profile for name, profile in found.items() if profile is not None}


class VfProfiles:
    """The applier; ``changes`` is the last plan (metrics, doctor and the HTTP endpoint read it)."""

    def __init__(
        self,
        sysfs_root: Path,
        holders: HoldersSource,
        writer: VfWriter | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        grace: float = WITHDRAW_GRACE,
    ) -> None:
        self.sysfs_root = sysfs_root
        self.changes: tuple[VfChange, ...] = ()
        self._holders = holders
        self._write = writer or sysfs_writer(sysfs_root)
        self._clock = clock
        self._grace = grace
        self._waiting = Backoff(*PENDING_RETRY)
        self._failing = Backoff(*FAILED_RETRY)
        self._failed: dict[str, tuple[int, str]] = {}  # PF -> (count asked, why it failed)
        self._logged: dict[str, str] = {}  # PF or engine -> the line last logged for it
        self._withholding = False  # the front end was last handed an inventory without VFs
        # VFs the kernel may have left frozen: a refused disable takes every queue of the idle
        # VFs it checked before the busy one (qm_try_frozen_vfs) until a disable succeeds, so
        # their 0 free queues mean nobody, not everybody (PF -> those VFs, while they exist).
        self._frozen: dict[str, tuple[str, ...]] = {}
        self._vfs: dict[str, tuple[str, ...]] = {}  # PF -> its VFs at the last plan

    def due(self) -> bool:
        """Whether the scan tick should reconcile again although nothing moved."""
        now = self._clock()
        if self._withholding:
            return True
        return any(
            c.state == "pending" and self._retry(c).not_before(c.pf) <= now for c in self.changes
        )

    async def reconcile(self, inventory: Inventory, settings: Settings, serve: Serve) -> bool:
        """Serve ``inventory``, changing the PFs that can change now; True when a write was
        made (the caller then rescans at once to serve the new set)."""
        profiles = profiles_of(settings)
        if not profiles:
            self.changes = ()
            await self._serve(inventory, settings, serve, frozenset())
            return False
        changes = self._plan(profiles, inventory, await self._ask(profiles, inventory))
        ready = [c for c in changes if c.state == "ready"]
        if not ready:
            await self._serve(inventory, settings, serve, frozenset())
            return False
        await self._serve(inventory, settings, serve, frozenset(c.pf for c in ready))
        if any(c.present for c in ready):
            # Nothing new can be given out now: whoever holds a VF at this point keeps it. The
            # grace lets an allocation the kubelet had in flight reach pod-resources first.
            await asyncio.sleep(self._grace)
            changes = self._plan(profiles, inventory, await self._holders(inventory))
            ready = [c for c in changes if c.state == "ready"]
        if not ready:  # every one of them was taken meanwhile: serve them all again
            await self._serve(inventory, settings, serve, frozenset())
            return False
        for change in ready:
            await asyncio.to_thread(self._apply, change)
        self.changes = tuple(self._after(c) for c in changes)
        self._log_changes()
        return bool(ready)

    async def _ask(self, profiles: Mapping[str, VfProfile], inventory: Inventory) -> Holders | None:
        # The kubelet is asked only when some PF would lose VFs.
        empty: Holders = {}
        draft = plan(profiles, read_pfs(str(self.sysfs_root), inventory), set(), {}, empty)
        shrinking = any(c.present and c.state in ("ready", "pending") for c in draft)
        return await self._holders(inventory) if shrinking else empty

    def _plan(
        self, profiles: Mapping[str, VfProfile], inventory: Inventory, holders: Holders | None
    ) -> tuple[VfChange, ...]:
        pfs = read_pfs(str(self.sysfs_root), inventory)
        engines = {d.engine for d in inventory}
        available = {d.pci_address: d.available_instances for d in inventory}
        self._vfs = {pf.pci_address: pf.vfs for pf in pfs}
        for pf in pfs:
            if self._frozen.get(pf.pci_address) != pf.vfs:
                self._frozen.pop(pf.pci_address, None)  # other VFs now: none is frozen
            for vf in self._frozen.get(pf.pci_address, ()):
                if available.get(vf) == 0:
                    available[vf] = QUEUES_PER_ENGINE
        now = self._clock()
        changes = []
        for planned in plan(profiles, pfs, engines, available, holders):
            failed = self._failed.get(planned.pf)
            if failed is not None and failed[0] != planned.desired:
                self._forget(planned.pf)  # a new profile: the old failure says nothing of it
            elif (
                failed is not None
                and planned.state == "ready"
                and self._failing.not_before(planned.pf) > now
            ):
                planned = _pending(planned, "write-failed", failed[1])  # noqa: PLW2901
            changes.append(planned)
        self.changes = tuple(changes)
        for change in changes:
            if change.state == "pending" and change.reason != "write-failed":
                self._waiting.failed(change.pf, now)
            elif change.state != "pending":
                self._waiting.succeeded(change.pf)
        self._log_changes()
        return self.changes

    async def _serve(
        self, inventory: Inventory, settings: Settings, serve: Serve, pfs: frozenset[str]
    ) -> None:
        self._withholding = bool(pfs)
        if pfs:
            kept = tuple(
                d for d in inventory if d.function is Function.PF or d.parent_pf not in pfs
            )
            log.info("VF profiles: taking the VFs of %s out of service", ", ".join(sorted(pfs)))
            inventory = Inventory(kept, inventory.warnings)
        await serve(inventory, settings)

    def _apply(self, change: VfChange) -> None:
        """Write the PF's new count (through 0); record a failure. On a worker thread."""
        assert change.desired is not None
        steps = [0, change.desired] if change.present and change.desired else [change.desired]
        for count in steps:
            try:
                self._write(change.pf, count)
            except OSError as err:
                name = errno.errorcode.get(err.errno or 0, "error")
                why = (
                    f"{change.setting}: writing {count} to {change.pf}/sriov_numvfs failed: "
                    f"{name} ({err.strerror or err}); the node keeps serving the VFs it has"
                )
                self._failed[change.pf] = (change.desired, why)
                self._failing.failed(change.pf, self._clock())
                if count == 0 and err.errno == errno.EBUSY:
                    self._frozen[change.pf] = self._vfs.get(change.pf, ())
                return
        self._forget(change.pf)
        self._frozen.pop(change.pf, None)
        log.info(
            "%s: PF %s has %d VFs now (had %d)",
            change.setting,
            change.pf,
            change.desired,
            change.present,
        )

    def _after(self, change: VfChange) -> VfChange:
        failed = self._failed.get(change.pf)
        if change.state == "ready" and failed is not None:
            return _pending(change, "write-failed", failed[1])
        return change

    def _forget(self, pf: str) -> None:
        self._failed.pop(pf, None)
        self._failing.succeeded(pf)

    def _retry(self, change: VfChange) -> Backoff:
        return self._failing if change.reason == "write-failed" else self._waiting

    def _log_changes(self) -> None:
        for change in self.changes:
            key = change.pf or change.engine
            if not change.why or self._logged.get(key) == change.why:
                continue
            self._logged[key] = change.why
            level = logging.WARNING if change.state == "refused" else logging.INFO
            if change.reason == "write-failed":
                level = logging.ERROR
            log.log(level, "%s", change.why)


def _pending(change: VfChange, reason: Reason, why: str) -> VfChange:
    return VfChange(
        change.engine, change.pf, change.desired, change.present, "pending", reason, (), why
    )
