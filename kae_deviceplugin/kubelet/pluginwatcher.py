"""Registration through the kubelet's plugin watcher (<kubelet root>/plugins_registry).

In this mode there is no Register call: the kubelet finds our socket in plugins_registry, asks
GetInfo, dials the endpoint we name, and reports back with NotifyRegistrationStatus.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import grpc

from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2 as reg_pb
from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from kae_deviceplugin.api import VERSION
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.kubelet.registration import KubeletSocketRegistrar, Registrar
from kae_deviceplugin.kubelet.server import socket_name

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


def choose_registrar(settings: Settings) -> Registrar:
    """The registration mode, decided once at start from the settings and the kubelet's dirs."""
    if use_plugin_watcher(settings):
        return PluginWatcherRegistrar(settings.kubelet_root)
    return KubeletSocketRegistrar(settings.effective_device_plugin_dir)


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


class PluginWatcherRegistrar:
    """Serve the plugin-registration API on each socket in ``<kubelet root>/plugins_registry``.

    The kubelet's plugin watcher registers a plugin when its socket is created (and, at the
    kubelet's start, for every socket already there), and on no other event. So creating the
    socket is the registration, and a resource whose stream the kubelet ended is brought back by
    creating its socket again: ``recovery`` is "restart".
    """

    needs_kubelet_socket = False
    recovery: Literal["register", "restart"] = "restart"
    socket_dir_role = "plugins_registry"
    kubelet_finds_sockets_at_start = True

    def __init__(self, kubelet_root: Path) -> None:
        self.socket_dir = kubelet_root / "plugins_registry"

    def add_servicers(
        self, server: grpc.aio.Server, resource: str, on_registered: Callable[[str], None]
    ) -> None:
        endpoint = str(self.socket_dir / socket_name(resource))
        reg_grpc.add_RegistrationServicer_to_server(
            RegistrationServicer(resource, endpoint, on_registered), server
        )

    def register(self, resource: str, on_registered: Callable[[str], None]) -> None:
        """Nothing to call: the watcher registers the socket the server has just created."""

    def cancel(self, resource: str) -> None:
        """Nothing under way to cancel."""

    def registering(self, resource: str) -> bool:
        """Never: there is no call of ours to wait for."""
        return False
