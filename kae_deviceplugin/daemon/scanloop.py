"""The scan loop: discovery on every tick or uevent, the one inventory broadcast, config reloads.

Each changed inventory goes to the front end's ``reconcile`` first (it writes the files its
answers point at, then tells the kubelet) and is then published to every other subscriber (the
NFD file, ...). The settings live here because a reload replaces them here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.core.broadcast import LatestValue, wait_until_set
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.daemon.vf_profiles import VfProfiles
from kae_deviceplugin.discovery.incremental import IncrementalScanner
from kae_deviceplugin.errors import ScanDeferred
from kae_deviceplugin.observability.events import log_inventory_changes

log = logging.getLogger("kae_deviceplugin.daemon.supervisor")

# A quiet tick is one pread per kept sysfs file, about a microsecond each: with up to this many
# it runs on the event loop (a fraction of a millisecond), sparing the hop to a worker thread and
# back (two wake-ups, a context switch each way). Larger ones go to the thread, so the loop,
# which also answers the kubelet, never stalls for longer.
LOOP_TICK_MAX_FILES = 512

Reconcile = Callable[[Inventory, Settings], Awaitable[None]]


async def _nothing(inventory: Inventory, settings: Settings) -> None:
    """No front end: the inventory is only published."""


class ScanLoop:
    """Owns the scanner, the current inventory and settings, and the wake-up event."""

    def __init__(
        self,
        settings: Settings,
        scanner: IncrementalScanner,
        counters: Counters,
        *,
        reconcile: Reconcile = _nothing,
        retry_pending: Callable[[], bool] = lambda: False,
        tick: Callable[[], None] = lambda: None,
        config_source: ConfigSource | None = None,
    ) -> None:
        self.settings = settings
        self.scanner = scanner
        self.counters = counters
        self.reconcile = reconcile
        # Whether the last reconcile left work to redo (a file it could not write): retried on
        # every tick even when the inventory did not move.
        self.retry_pending = retry_pending
        self.tick = tick
        self.config_source = config_source
        self.inventory = Inventory()
        # The one broadcast of the inventory: whoever must act on a change (the NFD file, ...)
        # subscribes here instead of polling ``inventory``.
        self.inventories: LatestValue[Inventory] = LatestValue(self.inventory)
        self.rescan_now = asyncio.Event()
        self.profiles: VfProfiles | None = None  # the VF profiles, where scan_loop_for adds them
        self._scan_deferred = False  # the last scan could not look (logged once)
        self._reload_requested = False

    async def run(self) -> None:
        while True:
            self.tick()
            await wait_until_set(self.rescan_now, self.settings.scan_interval)
            # Asked by an event (udev, SIGHUP): static attributes may have changed too. Read
            # from the event, not the wait's result: a request that lands in the same loop
            # turn as the timeout ends the wait with "timed out" and would be lost here.
            if self.rescan_now.is_set():
                self.scanner.invalidate()
            self.rescan_now.clear()
            await self.maybe_reload()
            await self.rescan()

    async def rescan(self) -> None:
        started = time.perf_counter()
        try:
            inventory = self.scanner.quiet_tick(LOOP_TICK_MAX_FILES)
            if inventory is None:
                inventory = await asyncio.to_thread(self.scanner.scan)
        except ScanDeferred as err:  # our own shortage, not the node's: keep what we know
            if not self._scan_deferred:
                log.warning("%s; keeping the last inventory until it can be read", err)
            self._scan_deferred = True
            return
        self._scan_deferred = False
        self.counters.scan_duration.observe(time.perf_counter() - started)
        # The scanner hands back the very same object when nothing moved.
        if inventory is self.inventory and not self.retry_pending():
            return
        changed = inventory is not self.inventory
        log_inventory_changes(self.inventory, inventory, self.counters)
        self.inventory = inventory
        await self.reconcile(inventory, self.settings)
        if changed:
            self.inventories.publish(inventory)

    def request_reload(self) -> None:
        log.info("received SIGHUP: reloading the configuration")
        self._reload_requested = True
        self.rescan_now.set()

    async def maybe_reload(self) -> None:
        """Apply a changed configuration file (or SIGHUP); a bad one is logged and ignored."""
        requested, self._reload_requested = self._reload_requested, False
        source = self.config_source
        if source is None or not (requested or source.changed()):
            return
        new = source.load(self.settings)
        if new is None or new == self.settings:
            return
        self.settings = new
        log.info("configuration reloaded from %s", source.path)
        await self.reconcile(self.inventory, new)


def scan_loop_for(
    settings: Settings,
    counters: Counters,
    reconcile: Reconcile,
    container_files: ContainerFiles,
    *,
    tick: Callable[[], None],
    source: ConfigSource | None,
    profiles: VfProfiles | None = None,
) -> ScanLoop:
    """The scan loop of a front end whose reconcile writes ``container_files`` (both modes):
    a failed write of them is retried on every tick. With ``profiles``, each reconcile goes
    through the VF profiles first (they may take VFs out of service and change a PF's VFs, after
    which the loop rescans at once), and a change that waits is planned again on the tick."""

    def retry() -> bool:
        return container_files.problem is not None or (profiles is not None and profiles.due())

    loop = ScanLoop(
        settings,
        # Answers exactly what discovery's full scan would, re-reading only volatile signals.
        IncrementalScanner(settings.sysfs_root, settings.dev_root),
        counters,
        reconcile=reconcile,
        retry_pending=retry,
        tick=tick,
        config_source=source,
    )
    if profiles is not None:

        async def through_profiles(inventory: Inventory, settings: Settings) -> None:
            if await profiles.reconcile(inventory, settings, reconcile):
                loop.rescan_now.set()  # the new VFs: a full rescan (the run loop invalidates)

        loop.reconcile = through_profiles
        loop.profiles = profiles
    return loop
