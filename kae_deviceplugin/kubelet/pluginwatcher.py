"""Registration through the kubelet's plugin watcher (<kubelet root>/plugins_registry).

In this mode there is no Register call: the kubelet finds our socket in plugins_registry, asks
GetInfo, dials the endpoint we name, and reports back with NotifyRegistrationStatus.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc

from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2 as reg_pb
from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from kae_deviceplugin.api import VERSION
from kae_deviceplugin.config.settings import Settings

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DevicePlugin"


def use_plugin_watcher(settings: Settings) -> bool:
    """``auto`` picks the plugin watcher when plugins_registry sits beside the device-plugin dir."""
    if settings.registration != "auto":
        return settings.registration == "plugin-watcher"
    default_dir = settings.kubelet_root / "device-plugins"
    if settings.effective_device_plugin_dir != default_dir:
        return False  # an explicitly moved device-plugin dir means the socket protocol
    return (settings.kubelet_root / "plugins_registry").is_dir()


class RegistrationServicer(reg_grpc.RegistrationServicer):
    def __init__(self, resource: str, endpoint: str, registered: Callable[[str], None]) -> None:
        self.resource = resource
        self.endpoint = endpoint
        self.registered = registered

    async def GetInfo(
        self,
        request: reg_pb.InfoRequest,
        context: grpc.aio.ServicerContext[reg_pb.InfoRequest, reg_pb.PluginInfo],
    ) -> reg_pb.PluginInfo:
        return reg_pb.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.resource,
            endpoint=self.endpoint,
            supported_versions=[VERSION],
        )

    async def NotifyRegistrationStatus(
        self,
        request: reg_pb.RegistrationStatus,
        context: grpc.aio.ServicerContext[
            reg_pb.RegistrationStatus, reg_pb.RegistrationStatusResponse
        ],
    ) -> reg_pb.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("%s: registered through the plugin watcher", self.resource)
            self.registered(self.resource)
        else:
            log.error("%s: the kubelet rejected the registration: %s", self.resource, request.error)
        return reg_pb.RegistrationStatusResponse()


def add_registration_servicer(
    server: grpc.aio.Server, resource: str, endpoint: str, registered: Callable[[str], None]
) -> None:
    reg_grpc.add_RegistrationServicer_to_server(
        RegistrationServicer(resource, endpoint, registered), server
    )
