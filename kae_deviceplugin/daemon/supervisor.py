"""The daemon: scan loop, one server per resource, kubelet-restart watch, clean shutdown.

Root tasks live and die together: if one fails, everything stops and the process exits non-zero
so the DaemonSet restarts it, rather than leaving a half-alive plugin. On a kubelet restart every
server is stopped and started again and every resource re-registers (simple, obviously right).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from kae_deviceplugin import counters
from kae_deviceplugin.api import KUBELET_SOCKET
from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container import cdi
from kae_deviceplugin.container.allocate import ContainerOptions, host_sysfs_path
from kae_deviceplugin.container.sysfs_view import sync_view
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.core.views import EngineChoice, ResourceView, build_views
from kae_deviceplugin.daemon.dirwatch import DirWatch
from kae_deviceplugin.discovery.incremental import IncrementalScanner
from kae_deviceplugin.errors import SocketVanished
from kae_deviceplugin.kubelet.pluginwatcher import add_registration_servicer, use_plugin_watcher
from kae_deviceplugin.kubelet.registration import register_until_done
from kae_deviceplugin.kubelet.server import ResourceServer, ServingPolicy, socket_name
from kae_deviceplugin.kubelet.sockets import file_identity, is_live
from kae_deviceplugin.observability.events import log_inventory_changes

log = logging.getLogger(__name__)

WATCH_INTERVAL = 0.05  # kubelet.sock / own-socket polling where inotify is unavailable
# With inotify: a slow re-check in case an event was missed (an overflowed queue does wake the
# loop); kept below the liveness budget of 10 s, since the loop ticks only when it wakes.
WATCH_SAFETY_INTERVAL = 5.0
START_ATTEMPTS = 20  # binds lost to a kubelet's socket sweep before giving up (~4 s)
SETTLE_DELAY = 0.02  # after a directory event, before looking at the directory
STREAM_GRACE = 0.5  # how long a resource may go without a stream before we register again


class Daemon:
    """Owns every task and server of one plugin process."""

    def __init__(
        self,
        settings: Settings,
        config_source: ConfigSource | None = None,
        extra_tasks: list[Callable[[Daemon], Coroutine[Any, Any, None]]] | None = None,
    ) -> None:
        self.settings = settings
        self.config_source = config_source
        self.extra_tasks = extra_tasks or []
        self.inventory = Inventory()
        # The one broadcast of the inventory: whoever must act on a change (the NFD file, the
        # pod-resources poller) subscribes here instead of polling ``inventory``.
        self.inventories: LatestValue[Inventory] = LatestValue(self.inventory)
        self.views: dict[str, ResourceView] = {}
        self.latest: dict[str, LatestValue[ResourceView]] = {}
        self.servers: dict[str, ResourceServer] = {}
        self.registering: dict[str, asyncio.Task[None]] = {}
        self.registered: set[str] = set()
        self.rescan_now = asyncio.Event()
        self.stopping = asyncio.Event()
        self.loop_ticks: dict[str, float] = {}
        self.kubelet_identity = file_identity(self.kubelet_socket)
        # Answers exactly what sysfs.scan() would, re-reading only volatile signals per tick.
        self.scanner = IncrementalScanner(settings.sysfs_root, settings.dev_root)
        self.view_error_logged = False
        self._reload_requested = False
        self.loop: asyncio.AbstractEventLoop | None = None
        # asyncio primitives bind to the loop that first uses them, so creating them here is safe.
        self.servers_lock = asyncio.Lock()
        self.kubelet_dir_event = asyncio.Event()
        self.kubelet_socket_created = False  # inotify saw kubelet.sock created since last check

    # -- paths and derived settings ------------------------------------------------------------

    @property
    def socket_dir(self) -> Path:
        if use_plugin_watcher(self.settings):
            return self.settings.kubelet_root / "plugins_registry"
        return self.settings.effective_device_plugin_dir

    @property
    def kubelet_socket(self) -> Path:
        return self.settings.effective_device_plugin_dir / KUBELET_SOCKET

    def serving_policy(self) -> ServingPolicy:
        s = self.settings
        return ServingPolicy(
            container=ContainerOptions(
                sysfs_root=s.sysfs_root,
                state_dir=s.state_dir,
                sysfs_view=s.container_sysfs_view,
                uadk_numa_hint=s.env.uadk_numa_hint,
                openssl_engines=s.env.openssl_engines,
                cdi=s.cdi,
            ),
            allocation_policy=s.allocation_policy,
        )

    def engine_choices(self) -> dict[str, EngineChoice]:
        return {
            name: EngineChoice(e.enabled, e.shares, e.functions)
            for name, e in self.settings.engines.items()
        }

    # -- status read by probes and metrics (from another thread: only reads references) --------

    def ready(self) -> bool:
        """Every resource that has devices is registered and the kubelet is streaming from it."""
        if self.kubelet_identity is None and not use_plugin_watcher(self.settings):
            return False
        wanted = [r for r, view in self.views.items() if view.devices]
        return all(
            r in self.registered and r in self.servers and self.servers[r].servicer.streams > 0
            for r in wanted
        )

    def alive(self, now: float | None = None) -> bool:
        """Each root loop ticked recently enough."""
        now = time.monotonic() if now is None else now
        budget = max(10.0, 3 * self.settings.scan_interval)
        return all(now - tick < budget for tick in self.loop_ticks.values())

    # -- the main loop ---------------------------------------------------------------------------

    async def run(self, handle_signals: bool = True) -> int:
        """Serve until SIGTERM/SIGINT (exit code 0) or until a root task fails (1).

        ``handle_signals=False`` lets an embedding program (a test) run the daemon on a thread
        other than the main one, where signal handlers cannot be installed.
        """
        loop = asyncio.get_running_loop()
        self.loop = loop
        if handle_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.request_stop, signum)
            loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        try:
            return await self._run_tasks()
        finally:
            if handle_signals:
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    loop.remove_signal_handler(signum)

    def call_threadsafe(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the daemon's loop from any thread (tests, the HTTP endpoint)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(callback)

    async def _run_tasks(self) -> int:
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        await self.rescan()
        roots = [self.scan_loop(), self.watch_loop(), *(task(self) for task in self.extra_tasks)]
        tasks = [asyncio.create_task(coro) for coro in roots]
        stop_waiter = asyncio.create_task(self.stopping.wait())
        done, _ = await asyncio.wait([*tasks, stop_waiter], return_when=asyncio.FIRST_COMPLETED)
        code = 0
        for task in done:
            if task is not stop_waiter and not task.cancelled() and task.exception() is not None:
                log.critical("stopping: a root task failed", exc_info=task.exception())
                code = 1
        for task in [*tasks, stop_waiter]:
            task.cancel()
        await asyncio.gather(*tasks, stop_waiter, return_exceptions=True)
        await self.shutdown()
        return code

    def request_stop(self, signum: int | None = None) -> None:
        if signum is not None:
            log.info("received %s, shutting down", signal.Signals(signum).name)
        self.stopping.set()

    def request_reload(self) -> None:
        log.info("received SIGHUP: reloading the configuration")
        self._reload_requested = True
        self.rescan_now.set()

    async def shutdown(self) -> None:
        for task in self.registering.values():
            task.cancel()
        self.registering.clear()
        self.scanner.close()
        await asyncio.gather(*(server.stop(grace=0.2) for server in self.servers.values()))
        self.servers.clear()
        self.registered.clear()
        log.info("stopped: streams ended, sockets removed")

    async def scan_loop(self) -> None:
        while True:
            self.loop_ticks["scan"] = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.rescan_now.wait(), self.settings.scan_interval)
                # Woken by an event (udev, SIGHUP): static attributes may have changed too.
                self.scanner.invalidate()
            self.rescan_now.clear()
            await self.maybe_reload()
            await self.rescan()

    async def rescan(self) -> None:
        started = time.perf_counter()
        inventory = await asyncio.to_thread(self.scanner.scan)
        counters.SCAN_DURATION.observe(time.perf_counter() - started)
        # The scanner hands back the very same object when nothing moved; a failed update of
        # the container view is retried each tick even so.
        if inventory is self.inventory and not self.view_error_logged:
            return
        changed = inventory is not self.inventory
        log_inventory_changes(self.inventory, inventory)
        self.inventory = inventory
        await self.reconcile()
        if changed:
            self.inventories.publish(inventory)

    async def reconcile(self) -> None:
        """Bring servers and their published views in line with the inventory and settings."""
        async with self.servers_lock:  # never interleave with restart_all
            await self._reconcile()

    async def _reconcile(self) -> None:
        self.sync_container_view()
        views = build_views(self.inventory, self.engine_choices())
        for resource in list(self.servers):
            if resource not in views:  # disabled: tell the kubelet "no devices", then go
                self.publish(ResourceView(resource))
                await self.stop_resource(resource)
        for resource, view in views.items():
            self.publish(view)
            if resource not in self.servers and view.devices:
                await self.start_resource(resource)
        self.views = views

    def publish(self, view: ResourceView) -> None:
        latest = self.latest.get(view.resource)
        if latest is None:
            self.latest[view.resource] = LatestValue(view)
        elif _differs(latest.value, view):
            latest.publish(view)

    def sync_container_view(self) -> None:
        """Keep the node-wide files that Allocate answers point at in step with discovery."""
        s = self.settings
        try:
            if s.container_sysfs_view:
                sync_view(s.state_dir, self.inventory.devices)
            if s.cdi:
                entries = (
                    cdi.device_entry(
                        d, host_sysfs_path(d.pci_path, s.sysfs_root), s.container_sysfs_view
                    )
                    for d in self.inventory.devices
                )
                cdi.write_spec(s.cdi_dir, cdi.build_spec(entries))
            self.view_error_logged = False
        except OSError as err:
            if not self.view_error_logged:
                log.error("cannot update the container view or CDI spec: %s", err)
                self.view_error_logged = True

    # -- servers and registration ---------------------------------------------------------------

    async def start_resource(self, resource: str) -> None:
        extra = None
        if use_plugin_watcher(self.settings):
            endpoint = str(self.socket_dir / socket_name(resource))

            def extra(server: Any, resource: str = resource, endpoint: str = endpoint) -> None:
                add_registration_servicer(server, resource, endpoint, self.mark_registered)

        for attempt in range(START_ATTEMPTS):
            server = ResourceServer(
                resource,
                self.socket_dir,
                latest=self.latest[resource],
                policy=self.serving_policy,
                on_stream_lost=self.stream_lost,
                extra_servicers=extra,
            )
            try:
                await server.start()
                break
            except SocketVanished as err:
                # A restarting kubelet sweeps the directory while we bind; the sweep ends soon.
                if attempt == START_ATTEMPTS - 1:
                    raise
                log.debug("%s; starting again", err)
                await asyncio.sleep(0.02 * (attempt + 1))
        self.servers[resource] = server
        if not use_plugin_watcher(self.settings):
            self.register(resource)

    async def stop_resource(self, resource: str) -> None:
        task = self.registering.pop(resource, None)
        if task is not None:
            task.cancel()
        self.registered.discard(resource)
        server = self.servers.pop(resource, None)
        if server is not None:
            await server.stop(grace=0.2)

    def register(self, resource: str) -> None:
        old = self.registering.pop(resource, None)
        if old is not None:
            old.cancel()
        self.registered.discard(resource)
        self.registering[resource] = asyncio.create_task(
            register_until_done(
                self.settings.effective_device_plugin_dir,
                socket_name(resource),
                resource,
                lambda: self.mark_registered(resource),
            )
        )

    def mark_registered(self, resource: str) -> None:
        self.registered.add(resource)
        counters.REGISTRATIONS.labels(resource).inc()

    def stream_lost(self, resource: str) -> None:
        """A ListAndWatch stream ended. Re-register only if the kubelet opened no other one.

        A Register replaces the kubelet's previous stream, so an old stream ending right after our
        own re-registration is expected; answering every end with a Register would chase its tail.
        """
        server = self.servers.get(resource)
        if server is None or server.servicer.streams > 0 or self.stopping.is_set():
            return
        # Not "unregistered" yet: the kubelet may be opening the stream of a newer Register.
        # Readiness already needs a live stream, so nothing claims more than is true meanwhile.
        if use_plugin_watcher(self.settings):
            self.registered.discard(resource)
            return  # the plugin watcher re-dials by itself when it sees the socket again
        asyncio.get_running_loop().call_later(
            STREAM_GRACE, self._reregister_if_silent, resource, server
        )

    def _reregister_if_silent(self, resource: str, server: ResourceServer) -> None:
        if self.servers.get(resource) is not server or server.servicer.streams > 0:
            return  # restarted meanwhile, or the kubelet is streaming again
        if not self.stopping.is_set() and (task := self.registering.get(resource)) and task.done():
            log.info(
                "%s: no ListAndWatch stream for %.1f s; registering again", resource, STREAM_GRACE
            )
            self.register(resource)

    async def restart_all(self, why: str) -> None:
        async with self.servers_lock:
            log.info("%s: restarting %d servers and registering again", why, len(self.servers))
            resources = list(self.servers)
            for resource in resources:
                await self.stop_resource(resource)
            for resource in resources:
                await self.start_resource(resource)

    def kubelet_dir_changed(self, created: frozenset[str]) -> None:
        if KUBELET_SOCKET in created:
            self.kubelet_socket_created = True
        self.kubelet_dir_event.set()

    async def watch_loop(self) -> None:
        """Notice a kubelet restart (new kubelet.sock) or our own socket being removed.

        inotify on the device-plugin directory wakes this loop at once; without inotify it polls.
        """
        directories = {self.settings.effective_device_plugin_dir, self.socket_dir}
        watches = [DirWatch(d, self.kubelet_dir_changed) for d in sorted(directories)]
        for watch in watches:
            watch.attach(asyncio.get_running_loop())
        watched = all(w.available for w in watches)
        interval = WATCH_SAFETY_INTERVAL if watched else WATCH_INTERVAL
        if not watched:
            log.info("inotify unavailable: polling the kubelet directories every %.2f s", interval)
        try:
            while True:
                self.loop_ticks["watch"] = time.monotonic()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.kubelet_dir_event.wait(), interval)
                    # A restarting kubelet sweeps the directory, then creates kubelet.sock: let
                    # the burst settle instead of acting on the directory half-swept.
                    await asyncio.sleep(SETTLE_DELAY)
                self.kubelet_dir_event.clear()
                await self.check_kubelet()
        finally:
            for watch in watches:
                watch.close()

    async def check_kubelet(self) -> None:
        identity = file_identity(self.kubelet_socket)
        created, self.kubelet_socket_created = self.kubelet_socket_created, False
        if identity != self.kubelet_identity or (created and identity is not None):
            self.kubelet_identity = identity
            if identity is None:
                log.warning(
                    "kubelet socket %s is gone; waiting for the kubelet", self.kubelet_socket
                )
                self.registered.clear()
                return
            counters.KUBELET_RESTARTS.inc()
            await self.restart_all("kubelet (re)started")
            return
        lost = [r for r, server in self.servers.items() if not server.socket_intact()]
        if lost and not is_live(self.kubelet_socket):
            # Our sockets were swept but no kubelet answers yet: it is restarting. Registering
            # now would only race it; its new kubelet.sock is what we act on.
            return
        if lost:
            await self.restart_all(f"socket of {', '.join(sorted(lost))} was removed")

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
