"""The kubelet's plugin watcher (<kubelet root>/plugins_registry), for any kind of kubelet plugin.

A plugin puts a socket in plugins_registry serving the plugin-registration API; the kubelet finds
it, asks GetInfo (type, name, endpoint, versions), validates and connects to the endpoint, and
reports back with NotifyRegistrationStatus. Device plugins and DRA drivers differ only in what
GetInfo says, so the servicer takes all of it as parameters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2 as reg_pb
from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from kae_deviceplugin.kubelet.dial import OWN_CONNECTION, unix_target

log = logging.getLogger(__name__)

PLUGINS_REGISTRY = "plugins_registry"
DEVICE_PLUGIN_TYPE = "DevicePlugin"
DRA_PLUGIN_TYPE = "DRAPlugin"


def registry_dir(kubelet_root: Path) -> Path:
    """Where the plugin watcher looks; it follows ``--root-dir`` (FACTS §8)."""
    return kubelet_root / PLUGINS_REGISTRY


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """Answers the plugin watcher for one plugin; ``on_registered`` runs when the kubelet accepts.

    GetInfo must answer within the kubelet's 1 s deadline, so it only returns fixed values.
    """

    def __init__(
        self,
        plugin_type: str,
        name: str,
        endpoint: str,
        supported_versions: Sequence[str],
        on_registered: Callable[[], None],
    ) -> None:
        self.info = reg_pb.PluginInfo(
            type=plugin_type, name=name, endpoint=endpoint, supported_versions=supported_versions
        )
        self.on_registered = on_registered

    async def GetInfo(
        self,
        request: reg_pb.InfoRequest,
        context: grpc.aio.ServicerContext[reg_pb.InfoRequest, reg_pb.PluginInfo],
    ) -> reg_pb.PluginInfo:
        return self.info

    async def NotifyRegistrationStatus(
        self,
        request: reg_pb.RegistrationStatus,
        context: grpc.aio.ServicerContext[
            reg_pb.RegistrationStatus, reg_pb.RegistrationStatusResponse
        ],
    ) -> reg_pb.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("%s: registered through the plugin watcher", self.info.name)
            self.on_registered()
        else:
            log.error(
                "%s: the kubelet rejected the registration: %s", self.info.name, request.error
            )
        return reg_pb.RegistrationStatusResponse()


def add_registration(server: grpc.aio.Server, servicer: RegistrationServicer) -> None:
    """Serve ``servicer`` on ``server`` (callers need not import the generated code)."""
    reg_grpc.add_RegistrationServicer_to_server(servicer, server)


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """What a registration socket says about its plugin (GetInfo), as the kubelet reads it."""

    type: str
    name: str
    endpoint: str
    supported_versions: tuple[str, ...]


def query_info(socket: Path, timeout: float) -> PluginInfo:
    """Ask the registration socket GetInfo, as the plugin watcher does, within ``timeout``
    seconds (the kubelet gives a plugin 1 s). ConnectionError says why there was no answer.

    A blocking call (doctor's), so that it runs beside any event loop, a test's included.
    """
    with grpc.insecure_channel(unix_target(socket), options=[OWN_CONNECTION]) as channel:
        try:
            info = reg_grpc.RegistrationStub(channel).GetInfo(reg_pb.InfoRequest(), timeout=timeout)
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else None
            name = code.name if code is not None else "error"
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            raise ConnectionError(f"{name}: {details}") from None
    return PluginInfo(info.type, info.name, info.endpoint, tuple(info.supported_versions))
