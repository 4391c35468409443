"""The set of per-resource DevicePlugin servers: start, stop, restart, and register each.

One invariant keeps the kubelet's view right, and ``register`` checks it: **a resource is never
registered while a ListAndWatch stream of it may still be open.** A kubelet that gets a second
Register for a connected resource keeps the old connection, and when the old stream ends later
it disconnects the *new* client (kubernetes issue 121994). So every re-registration goes through a
stopped server (``restart``: the old streams end first) or follows a stream that has already
ended (``stream_lost``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import grpc

from kae_deviceplugin.container.serving import ServingPolicy
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.views import ResourceView
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.deviceplugin.registrars import Registrar
from kae_deviceplugin.deviceplugin.server import ResourceServer
from kae_deviceplugin.errors import SocketVanished, StartupError
from kae_deviceplugin.kubelet.sockets import is_live

log = logging.getLogger(__name__)

START_ATTEMPTS = 20  # binds lost to a kubelet's socket sweep before giving up (~4 s)
STREAM_GRACE = 0.5  # how long a resource may go without a stream before it is brought back
STOP_GRACE = 0.2  # how long open calls may finish when a server stops
# After a kubelet (re)start, how long its plugin watcher may take to register the sockets it
# found and its device manager to open their streams: its first dial of a plugin can fail and
# wait out gRPC's 1 s backoff (seen on the real kubelet).
KUBELET_START_GRACE = 5.0


class ServerSet:
    """Owns every ResourceServer and what is known of its registration."""

    def __init__(
        self,
        registrar: Registrar,
        latest: Mapping[str, LatestValue[ResourceView]],
        policy: Callable[[], ServingPolicy],
        stopping: asyncio.Event,
        counters: Counters,
        *,
        kubelet_socket: Path,
    ) -> None:
        self.registrar = registrar
        self.kubelet_socket = kubelet_socket
        self._kubelet_socket_seen = False  # once seen, its absence means a kubelet down
        self.counters = counters
        self.latest = latest
        self.policy = policy
        self.stopping = stopping
        self.servers: dict[str, ResourceServer] = {}
        self.registered: set[str] = set()
        # The last stream serial of each server when its registration began: only streams
        # opened after it are the kubelet's answer to that registration.
        self.registered_after: dict[str, int] = {}
        self.lock = asyncio.Lock()  # never interleave a restart with a reconcile
        self._recoveries: set[asyncio.Task[None]] = set()

    def streaming(self, resource: str) -> bool:
        """Registered, and the kubelet is streaming on a stream opened since the registration."""
        server = self.servers.get(resource)
        return server is not None and resource in self.registered and self._answered(server)

    def _answered(self, server: ResourceServer) -> bool:
        """A stream opened since the registration began is open: the kubelet's answer to it.

        A stream opened before (by any client of the socket) proves nothing about the kubelet,
        so it neither makes the resource ready nor holds off its recovery.
        """
        since = self.registered_after.get(server.resource, 0)
        return server.servicer.streams_since(since) > 0

    async def start(self, resource: str) -> None:
        for attempt in range(START_ATTEMPTS):
            server = ResourceServer(
                resource,
                self.registrar.socket_path(resource),
                latest=self.latest[resource],
                policy=self.policy,
                on_stream_lost=self.stream_lost,
                counters=self.counters,
                extra_servicers=functools.partial(self._add_servicers, resource=resource),
            )
            try:
                await server.start()
                break
            except RuntimeError as err:  # grpc's "Failed to bind to address"
                raise StartupError(
                    f"{server.socket_path}: cannot serve there ({err}); run as root, or mount "
                    "the kubelet's directory read-write"
                ) from None
            except SocketVanished as err:
                # A restarting kubelet sweeps the directory while we bind; the sweep ends soon.
                if attempt == START_ATTEMPTS - 1:
                    raise
                log.debug("%s; starting again", err)
                await asyncio.sleep(0.02 * (attempt + 1))
        self.servers[resource] = server
        self.register(resource)

    def _add_servicers(self, server: grpc.aio.Server, *, resource: str) -> None:
        self.registrar.add_servicers(server, resource, self.mark_registered)

    async def stop(self, resource: str) -> None:
        self.registrar.cancel(resource)
        self.registered.discard(resource)
        server = self.servers.pop(resource, None)
        if server is not None:
            await server.stop(grace=STOP_GRACE)

    async def stop_all(self) -> None:
        for resource in list(self.servers):
            self.registrar.cancel(resource)
        await asyncio.gather(*(s.stop(grace=STOP_GRACE) for s in self.servers.values()))
        self.servers.clear()
        self.registered.clear()

    async def restart(self, resources: list[str], why: str) -> None:
        """Stop, then start and register ``resources``: old streams end before any Register."""
        log.info("%s: restarting %d servers and registering again", why, len(resources))
        for resource in resources:
            await self.stop(resource)
        for resource in resources:
            await self.start(resource)

    async def restart_all(self, why: str) -> None:
        async with self.lock:
            await self.restart(list(self.servers), why)

    def register(self, resource: str) -> None:
        server = self.servers[resource]
        if server.servicer.streams:
            raise AssertionError(f"{resource}: registering with a stream still open")
        self.registered.discard(resource)
        self.registered_after[resource] = server.servicer.last_serial
        self.registrar.register(resource, self.mark_registered)

    def mark_registered(self, resource: str) -> None:
        self.registered.add(resource)
        self.counters.registrations.labels(resource).inc()

    def stream_lost(self, resource: str) -> None:
        """A ListAndWatch stream ended: bring the resource back if no other stream opens soon.

        A Register replaces the kubelet's previous stream, so an old stream ending right after a
        re-registration is expected; answering every end at once would chase its own tail.
        """
        server = self.servers.get(resource)
        if server is None or self._answered(server) or self.stopping.is_set():
            return
        asyncio.get_running_loop().call_later(STREAM_GRACE, self._recover, resource, server)

    def _recover(self, resource: str, server: ResourceServer) -> None:
        if self.servers.get(resource) is not server or self._answered(server):
            return  # restarted meanwhile, or the kubelet is streaming again
        if self.stopping.is_set():
            return
        if self.registrar.kubelet_finds_sockets_at_start and self._kubelet_will_register():
            asyncio.get_running_loop().call_later(STREAM_GRACE, self._recover, resource, server)
            return
        self.registered.discard(resource)
        # Where the kubelet acts only on a socket being created, make it a new one; and where
        # some older stream is still open, end it first: no Register while a stream is open.
        if self.registrar.recovery == "restart" or server.servicer.streams:
            log.info(
                "%s: no kubelet stream for %.1f s; restarting its server", resource, STREAM_GRACE
            )
            task = asyncio.get_running_loop().create_task(self._restart_one(resource, server))
            self._recoveries.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self._recoveries.discard)
            return
        if self.registrar.registering(resource):
            return  # a Register is still retrying: it will bring the stream
        log.info("%s: no ListAndWatch stream for %.1f s; registering again", resource, STREAM_GRACE)
        self.register(resource)

    def _kubelet_will_register(self) -> bool:
        """The kubelet is down or has just started, so its plugin watcher will register (or is
        registering) the sockets it finds: leave them be. A socket re-created now can land just
        after the watcher's walk, and the kubelet then deregisters and registers it again, a
        second drop of allocatable (seen on the real kubelet, about one restart in ten).

        Read from kubelet.sock itself, not from the kubelet watch, which acts only after its
        settle delay: a socket made less than KUBELET_START_GRACE ago is a kubelet starting, one
        nobody answers on (or gone after being seen) a kubelet down. A kubelet.sock never seen
        (not mounted) tells nothing: the stream is recovered as before.
        """
        try:
            made = self.kubelet_socket.stat().st_ctime
        except OSError:
            return self._kubelet_socket_seen
        self._kubelet_socket_seen = True
        if time.time() - made < KUBELET_START_GRACE:
            return True
        return not is_live(self.kubelet_socket)

    async def _restart_one(self, resource: str, server: ResourceServer) -> None:
        async with self.lock:
            if self.servers.get(resource) is server and not self.stopping.is_set():
                await self.restart([resource], f"{resource} lost its stream")
