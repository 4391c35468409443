"""One resource's DevicePlugin gRPC server on its own unix socket, fed by a broadcast value."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

import grpc

from kae_deviceplugin.api import pb_grpc
from kae_deviceplugin.container.serving import ServingPolicy
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.views import ResourceView
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.deviceplugin.servicer import DevicePluginServicer
from kae_deviceplugin.errors import SocketVanished
from kae_deviceplugin.kubelet.sockets import (
    SocketIdentity,
    bind_privately,
    prepare_socket_path,
    remove_own_socket,
)

log = logging.getLogger(__name__)


class ResourceServer:
    """Owns one gRPC server and its socket; started and stopped by the supervisor only."""

    def __init__(
        self,
        resource: str,
        socket_path: Path,
        *,
        latest: LatestValue[ResourceView],
        policy: Callable[[], ServingPolicy],
        on_stream_lost: Callable[[str], None],
        counters: Counters,
        extra_servicers: Callable[[grpc.aio.Server], None] | None = None,
    ) -> None:
        self.resource = resource
        self.socket_path = socket_path
        self.servicer = DevicePluginServicer(resource, latest, policy, on_stream_lost, counters)
        self.extra_servicers = extra_servicers
        self._server: grpc.aio.Server | None = None
        self._identity: SocketIdentity | None = None

    async def start(self) -> None:
        prepare_socket_path(self.socket_path)
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_DevicePluginServicer_to_server(self.servicer, server)
        if self.extra_servicers is not None:
            self.extra_servicers(server)
        try:
            st = await bind_privately(server, self.socket_path)
        except FileNotFoundError as err:
            await server.stop(None)
            raise SocketVanished(f"{self.socket_path} was removed as soon as it was bound") from err
        except BaseException:
            await server.stop(None)
            raise
        self._identity = (st.st_dev, st.st_ino)
        self._server = server
        log.debug("%s: serving on %s", self.resource, self.socket_path)

    def socket_intact(self) -> bool:
        """False once someone (a restarting kubelet) removed or replaced our socket file."""
        try:
            st = os.lstat(self.socket_path)
        except OSError:
            return False
        return stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == self._identity

    async def stop(self, grace: float = 0.5) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self.servicer.stopping = True
        await server.stop(grace)
        if self._identity is not None:  # never a socket another process bound at our name
            remove_own_socket(self.socket_path, self._identity)
        self._identity = None
