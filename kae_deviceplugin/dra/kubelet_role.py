"""The DRA driver as the kubelet reaches it: two sockets, as the kubelet's plugin manager wants
them. The registration socket in ``<kubelet root>/plugins_registry`` (GetInfo: type DRAPlugin,
our driver name, the service socket, the services served) and the service socket under
``<kubelet root>/plugins/<driver>`` (DRAPlugin v1 and v1beta1, DRAResourceHealth v1 and
v1alpha1). With ``POD_UID`` set both names carry it (``dra.api.socket_paths``, with upstream's
shorter names where the usual ones do not fit), so a rolling update with maxSurge has two live
instances. Only the sockets this process bound are removed when it stops.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import grpc

from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra.api import (
    DRIVER,
    HEALTH_SERVICES,
    PLUGIN_SERVICES,
    PLUGIN_TYPE,
    socket_paths,
)
from kae_deviceplugin.dra.health import add_health_servicers
from kae_deviceplugin.dra.plugin import Answered, Preparer, add_plugin_servicers
from kae_deviceplugin.kubelet.pluginwatcher import RegistrationServicer, add_registration
from kae_deviceplugin.kubelet.sockets import BoundSockets

log = logging.getLogger(__name__)

STOP_GRACE = 0.5


class KubeletRole:
    """Serves the kubelet's DRA calls on the node's two sockets until cancelled."""

    def __init__(self, kubelet_root: Path, pod_uid: str | None) -> None:
        self.kubelet_root, self.pod_uid = kubelet_root, pod_uid
        # The names that fit below the root; where none does, ``check`` refuses the start.
        self.registration_socket, self.service_socket = socket_paths(
            kubelet_root, pod_uid, strict=False
        )
        self.registered: set[str] = set()  # DRIVER once the plugin watcher took us
        self._servers: list[grpc.aio.Server] = []
        self._sockets = BoundSockets()  # only these are removed at exit

    def check(self) -> None:
        """A kubelet root too long for any socket name: SocketPathTooLong (exit 3)."""
        socket_paths(self.kubelet_root, self.pod_uid)

    async def serve(
        self,
        preparer: Preparer,
        inventories: LatestValue[Inventory],
        node: str,
        answered: Answered,
    ) -> None:
        service = grpc.aio.server()
        add_plugin_servicers(service, preparer, answered=answered)
        add_health_servicers(service, inventories, node)
        registration = grpc.aio.server()
        servicer = RegistrationServicer(
            PLUGIN_TYPE,
            DRIVER,
            str(self.service_socket),
            [*PLUGIN_SERVICES, *HEALTH_SERVICES],
            lambda: self.registered.add(DRIVER),
        )
        add_registration(registration, servicer)
        try:
            # The service first: the kubelet dials it as soon as it sees the registration.
            for server, path in (
                (service, self.service_socket),
                (registration, self.registration_socket),
            ):
                self._servers.append(server)
                await self._sockets.bind(server, path)
            log.info(
                "serving %s; registration socket %s", self.service_socket, self.registration_socket
            )
            await asyncio.Future()  # until cancelled
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        """Stop serving and remove the sockets this process bound."""
        servers, self._servers = self._servers, []
        await asyncio.gather(*(s.stop(STOP_GRACE) for s in servers))
        self._sockets.remove_all()
        self.registered.discard(DRIVER)
