"""Notice a kubelet restart (a new kubelet.sock) or our own sockets being removed, and act.

inotify on the kubelet's directories wakes the watch at once; without inotify it polls. Two
things count as a restart: a creation event for ``kubelet.sock`` (a new socket can reuse the old
inode and ctime), and our own socket vanishing, which only counts while a live kubelet answers:
mid-restart, the kubelet's new socket is what we act on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from kae_deviceplugin.api import KUBELET_SOCKET
from kae_deviceplugin.core.broadcast import wait_until_set
from kae_deviceplugin.deviceplugin.server_set import ServerSet
from kae_deviceplugin.kubelet.dirwatch import DirWatch
from kae_deviceplugin.kubelet.sockets import file_identity, is_live

log = logging.getLogger(__name__)

WATCH_INTERVAL = 0.05  # kubelet.sock / own-socket polling where inotify is unavailable
# With inotify: a slow re-check in case an event was missed (an overflowed queue does wake the
# loop); kept below the liveness budget of 10 s, since the loop ticks only when it wakes.
WATCH_SAFETY_INTERVAL = 5.0
SETTLE_DELAY = 0.02  # after a directory event, before looking at the directory


class KubeletWatch:
    """Watches the device-plugin directory (and ours, if another) for the kubelet's moves."""

    def __init__(
        self, device_plugin_dir: Path, servers: ServerSet, tick: Callable[[], None]
    ) -> None:
        self.device_plugin_dir = device_plugin_dir
        self.kubelet_socket = device_plugin_dir / KUBELET_SOCKET
        self.servers = servers
        self.tick = tick
        self.identity = file_identity(self.kubelet_socket)
        self.event = asyncio.Event()
        self.socket_created = False  # inotify saw kubelet.sock created since the last check

    def directory_changed(self, created: frozenset[str]) -> None:
        if KUBELET_SOCKET in created:
            self.socket_created = True
        self.event.set()

    async def run(self) -> None:
        directories = {self.device_plugin_dir, self.servers.registrar.socket_dir}
        watches = [DirWatch(d, self.directory_changed) for d in sorted(directories)]
        for watch in watches:
            watch.attach(asyncio.get_running_loop())
        watched = all(w.available for w in watches)
        interval = WATCH_SAFETY_INTERVAL if watched else WATCH_INTERVAL
        if not watched:
            log.info("inotify unavailable: polling the kubelet directories every %.2f s", interval)
        try:
            while True:
                self.tick()
                if await wait_until_set(self.event, interval):
                    # A restarting kubelet sweeps the directory, then creates kubelet.sock: let
                    # the burst settle instead of acting on the directory half-swept.
                    await asyncio.sleep(SETTLE_DELAY)
                self.event.clear()
                await self.check()
        finally:
            for watch in watches:
                watch.close()

    async def check(self) -> None:
        identity = file_identity(self.kubelet_socket)
        created, self.socket_created = self.socket_created, False
        if identity != self.identity or (created and identity is not None):
            self.identity = identity
            if identity is None:
                log.warning(
                    "kubelet socket %s is gone; waiting for the kubelet", self.kubelet_socket
                )
                self.servers.registered.clear()
                return
            self.servers.counters.kubelet_restarts.inc()
            if self.servers.registrar.kubelet_finds_sockets_at_start:
                # Its plugin watcher registers the sockets it finds; new ones would make it
                # deregister those first (seen on the real kubelet). Lost sockets are still
                # re-created below, and a stream that stays away by the stream-loss recovery.
                log.info("kubelet (re)started: its plugin watcher registers our sockets again")
            else:
                await self.servers.restart_all("kubelet (re)started")
                return
        lost = [r for r, server in self.servers.servers.items() if not server.socket_intact()]
        if lost and not is_live(self.kubelet_socket):
            # Our sockets were swept but no kubelet answers yet: it is restarting. Registering
            # now would only race it; its new kubelet.sock is what we act on.
            return
        if lost:
            await self.servers.restart_all(f"socket of {', '.join(sorted(lost))} was removed")
