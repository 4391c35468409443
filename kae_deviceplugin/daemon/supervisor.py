"""The daemon: owns every root task, runs the scan loop, and publishes what it found.

Root tasks live and die together: if one fails, everything stops and the process exits non-zero
so the DaemonSet restarts it, rather than leaving a half-alive plugin. The parts are apart: the
registration mode is chosen once (a Registrar), the per-resource servers are a ServerSet, the
kubelet's restarts are seen by a KubeletWatch; this class wires them and keeps the inventory.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from kae_deviceplugin.api import KUBELET_SOCKET
from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.core.broadcast import LatestValue, wait_until_set
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.core.views import ResourceView, build_views
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.daemon.container_files import ContainerFiles
from kae_deviceplugin.daemon.host_files import remove_if_unused
from kae_deviceplugin.daemon.kubelet_watch import KubeletWatch
from kae_deviceplugin.daemon.preflight import prepare_socket_dir
from kae_deviceplugin.daemon.roots import run_until_one_ends, signal_handlers
from kae_deviceplugin.daemon.servers import ServerSet
from kae_deviceplugin.discovery.incremental import IncrementalScanner
from kae_deviceplugin.errors import ScanDeferred
from kae_deviceplugin.kubelet.pluginwatcher import choose_registrar
from kae_deviceplugin.kubelet.server import ResourceServer, ServingPolicy
from kae_deviceplugin.observability.events import log_inventory_changes
from kae_deviceplugin.observability.summary import log_summary

log = logging.getLogger(__name__)

# A quiet tick is one pread per kept sysfs file, about a microsecond each: with up to this many
# it runs on the event loop (a fraction of a millisecond), sparing the hop to a worker thread and
# back (two wake-ups, a context switch each way). Larger ones go to the thread, so the loop,
# which also answers the kubelet, never stalls for longer.
LOOP_TICK_MAX_FILES = 512


class Daemon:
    """Owns every task and server of one plugin process."""

    def __init__(
        self,
        settings: Settings,
        config_source: ConfigSource | None = None,
        extra_tasks: list[Callable[[Daemon], Coroutine[Any, Any, None]]] | None = None,
        counters: Counters | None = None,
    ) -> None:
        self.settings = settings
        # This daemon's own metrics registry, handed to each part that counts (not a global).
        self.counters = counters or Counters()
        self.config_source = config_source
        self.extra_tasks = extra_tasks or []
        self.inventory = Inventory()
        # The one broadcast of the inventory: whoever must act on a change (the NFD file, the
        # pod-resources poller) subscribes here instead of polling ``inventory``.
        self.inventories: LatestValue[Inventory] = LatestValue(self.inventory)
        self.views: dict[str, ResourceView] = {}
        self.latest: dict[str, LatestValue[ResourceView]] = {}
        self.rescan_now = asyncio.Event()
        self.stopping = asyncio.Event()
        self.loop_ticks: dict[str, float] = {}
        # Answers exactly what discovery's full scan would, re-reading only volatile signals.
        self.scanner = IncrementalScanner(settings.sysfs_root, settings.dev_root)
        self.container_files = ContainerFiles()
        self._scan_deferred = False  # the last scan could not look (logged once)
        self._reload_requested = False
        self.loop: asyncio.AbstractEventLoop | None = None
        # The registration mode is decided here, once; nothing re-tests the filesystem for it.
        # (asyncio primitives bind to the loop that first uses them, so creating them is safe.)
        self.server_set = ServerSet(
            choose_registrar(settings),
            self.latest,
            self.serving_policy,
            self.stopping,
            self.counters,
            kubelet_socket=settings.effective_device_plugin_dir / KUBELET_SOCKET,
        )
        self.kubelet_watch = KubeletWatch(
            settings.effective_device_plugin_dir, self.server_set, self._ticked("watch")
        )

    @property
    def servers(self) -> dict[str, ResourceServer]:
        return self.server_set.servers

    @property
    def registered(self) -> set[str]:
        return self.server_set.registered

    @property
    def socket_dir(self) -> Path:
        return self.server_set.registrar.socket_dir

    def serving_policy(self) -> ServingPolicy:
        return ServingPolicy.from_settings(self.settings, self.view_problem)

    @property
    def view_problem(self) -> str | None:
        """Why the container view or CDI spec cannot be written, if it cannot."""
        return self.container_files.problem

    # -- status read by probes and metrics (from another thread: only reads references) --------

    def ready(self) -> bool:
        """Every resource with devices is registered, and the kubelet streams from each."""
        if self.server_set.registrar.needs_kubelet_socket and not self.kubelet_watch.identity:
            return False
        if self.view_problem is not None:
            return False
        wanted = [r for r, view in self.views.items() if view.devices]
        return all(self.server_set.streaming(r) for r in wanted)

    def alive(self, now: float | None = None) -> bool:
        """Each root loop ticked recently enough."""
        now = time.monotonic() if now is None else now
        budget = max(10.0, 3 * self.settings.scan_interval)
        return all(now - tick < budget for tick in self.loop_ticks.values())

    def _ticked(self, loop_name: str) -> Callable[[], None]:
        def tick() -> None:
            self.loop_ticks[loop_name] = time.monotonic()

        return tick

    # -- the main loop ---------------------------------------------------------------------------

    async def run(self, handle_signals: bool = True) -> int:
        """Serve until SIGTERM/SIGINT (exit code 0) or until a root task fails (non-zero).

        ``handle_signals=False`` lets an embedding program (a test) run the daemon on a thread
        other than the main one, where signal handlers cannot be installed.
        """
        self.loop = asyncio.get_running_loop()
        with signal_handlers(self.loop, self.request_stop, self.request_reload, handle_signals):
            prepare_socket_dir(self.socket_dir, self.server_set.registrar.socket_dir_role)
            await self.rescan()
            log_summary(self.inventory)
            roots = [self.scan_loop(), self.kubelet_watch.run()]
            code = await run_until_one_ends(
                [*roots, *(task(self) for task in self.extra_tasks)], self.stopping
            )
            await self.shutdown()
            return code

    def call_threadsafe(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the daemon's loop from any thread (tests, the HTTP endpoint)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(callback)

    def request_stop(self, signum: int | None = None) -> None:
        if signum is not None:
            log.info("received %s, shutting down", signal.Signals(signum).name)
        self.stopping.set()

    def request_reload(self) -> None:
        log.info("received SIGHUP: reloading the configuration")
        self._reload_requested = True
        self.rescan_now.set()

    async def shutdown(self) -> None:
        self.scanner.close()
        await self.server_set.stop_all()
        log.info("stopped: streams ended, sockets removed")
        await remove_if_unused(self.settings)

    async def scan_loop(self) -> None:
        while True:
            self.loop_ticks["scan"] = time.monotonic()
            if await wait_until_set(self.rescan_now, self.settings.scan_interval):
                # Woken by an event (udev, SIGHUP): static attributes may have changed too.
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
        # The scanner hands back the very same object when nothing moved; a failed update of
        # the container view is retried each tick even so.
        if inventory is self.inventory and self.view_problem is None:
            return
        changed = inventory is not self.inventory
        log_inventory_changes(self.inventory, inventory, self.counters)
        self.inventory = inventory
        await self.reconcile()
        if changed:
            self.inventories.publish(inventory)

    async def reconcile(self) -> None:
        """Bring servers and their published views in line with the inventory and settings."""
        async with self.server_set.lock:  # never interleave with a restart
            await self._reconcile()

    async def _reconcile(self) -> None:
        self.sync_container_view()
        views = build_views(self.inventory, self.settings.engines)
        for resource in list(self.servers):
            if resource not in views:  # disabled: tell the kubelet "no devices", then go
                self.publish(ResourceView(resource))
                await self.server_set.stop(resource)
        for resource, view in views.items():
            self.publish(view)
            if resource not in self.servers and view.devices:
                await self.server_set.start(resource)
        self.views = views

    def publish(self, view: ResourceView) -> None:
        latest = self.latest.get(view.resource)
        if latest is None:
            self.latest[view.resource] = LatestValue(view)
        elif _differs(latest.value, view):
            latest.publish(view)

    def sync_container_view(self) -> None:
        """Keep the node-wide files that Allocate answers point at in step with discovery."""
        self.container_files.sync(self.settings, self.inventory, self.serving_policy().container)

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
        await self.reconcile()


def _differs(old: ResourceView, new: ResourceView) -> bool:
    """Worth waking every stream for: what the kubelet sees, or which devices back the IDs."""
    if old.kubelet_view != new.kubelet_view:
        return True
    return [(d.device.name, d.device.pci_path) for d in old.devices] != [
        (d.device.name, d.device.pci_path) for d in new.devices
    ]
