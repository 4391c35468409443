"""How device-plugin resources get registered, chosen once at start: Register over kubelet.sock
(with capped backoff while the kubelet is away), or a socket in plugins_registry."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

import grpc

from kae_deviceplugin.api import KUBELET_SOCKET, VERSION, pb, pb_grpc, plugin_options
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.deviceplugin.servicer import socket_path
from kae_deviceplugin.errors import RegistrationFailed
from kae_deviceplugin.kubelet.dial import OWN_CONNECTION, unix_target
from kae_deviceplugin.kubelet.pluginwatcher import (
    DEVICE_PLUGIN_TYPE,
    RegistrationServicer,
    add_registration,
    registry_dir,
)

log = logging.getLogger(__name__)

REGISTER_TIMEOUT = 15.0  # the kubelet dials back with a 10 s timeout before it answers
BACKOFF_START = 0.05
BACKOFF_CAP = 5.0


async def register_once(device_plugin_dir: Path, endpoint: str, resource: str) -> None:
    """One Register call; raises grpc.aio.AioRpcError or RegistrationFailed."""
    target = unix_target(device_plugin_dir / KUBELET_SOCKET)
    async with grpc.aio.insecure_channel(target, options=[OWN_CONNECTION]) as channel:
        stub = pb_grpc.RegistrationStub(channel)
        request = pb.RegisterRequest(
            version=VERSION,
            endpoint=endpoint,
            resource_name=resource,
            options=plugin_options(),
        )
        try:
            await stub.Register(request, timeout=REGISTER_TIMEOUT, wait_for_ready=False)
        except grpc.aio.AioRpcError as err:
            if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            raise RegistrationFailed(f"kubelet refused {resource}: {err.details()}") from err


async def register_until_done(
    device_plugin_dir: Path,
    endpoint: str,
    resource: str,
    on_registered: Callable[[], None] | None = None,
) -> None:
    """Register, retrying with capped exponential backoff; logs once per state change."""
    delay = BACKOFF_START
    last_problem: str | None = None
    while True:
        try:
            await register_once(device_plugin_dir, endpoint, resource)
        except (grpc.aio.AioRpcError, RegistrationFailed) as err:
            problem = (
                f"kubelet not reachable at {device_plugin_dir / KUBELET_SOCKET}"
                if isinstance(err, grpc.aio.AioRpcError)
                else str(err)
            )
            if problem != last_problem:
                log.warning(
                    "%s: %s; retrying with backoff up to %.0f s", resource, problem, BACKOFF_CAP
                )
                last_problem = problem
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_CAP)
            continue
        log.info("%s: registered with the kubelet (endpoint %s)", resource, endpoint)
        if on_registered is not None:
            on_registered()
        return


class Registrar(Protocol):
    """How resources get registered with the kubelet; chosen once, at start.

    Two kinds exist: :class:`KubeletSocketRegistrar` calls Register on ``kubelet.sock``;
    :class:`PluginWatcherRegistrar` puts our sockets in
    ``plugins_registry``, where the kubelet registers a plugin when its socket is created.
    """

    socket_dir: Path  # where our DevicePlugin sockets live
    socket_dir_role: str  # the kubelet's name for that directory, for messages
    # The setting that placed socket_dir, and its value: a refusal names them.
    socket_dir_setting: tuple[str, Path]
    needs_kubelet_socket: bool  # readiness needs kubelet.sock to exist
    # What brings back a resource whose stream the kubelet ended: a new Register ("register"),
    # or, where the kubelet acts only on socket creation, a new socket ("restart").
    recovery: Literal["register", "restart"]
    # Whether a starting kubelet registers our existing sockets by itself (the plugin watcher
    # walks plugins_registry at start), so that re-creating them would only make it deregister
    # what it has just registered.
    kubelet_finds_sockets_at_start: bool

    def socket_path(self, resource: str) -> Path:
        """Where ``resource``'s socket goes: the first of its names that fits a unix socket
        address in ``socket_dir``; SocketPathTooLong (one line, exit 3) if none does."""

    def add_servicers(self, server: grpc.aio.Server, resource: str, on_registered: Done) -> None:
        """Add what the kubelet needs on our socket besides the DevicePlugin service."""

    def register(self, resource: str, on_registered: Done) -> None:
        """Start registering ``resource``, whose server is serving and has no open stream."""

    def cancel(self, resource: str) -> None:
        """Stop any registration of ``resource`` under way."""

    def registering(self, resource: str) -> bool:
        """A registration of ``resource`` is still under way."""


Done = Callable[[str], None]


class KubeletSocketRegistrar:
    """Register over ``<device-plugin dir>/kubelet.sock``, retried with capped backoff."""

    needs_kubelet_socket = True
    recovery: Literal["register", "restart"] = "register"
    socket_dir_role = "device-plugins"
    kubelet_finds_sockets_at_start = False  # a restarting kubelet deletes them

    def __init__(self, device_plugin_dir: Path, setting: tuple[str, Path] | None = None) -> None:
        self.socket_dir = device_plugin_dir
        self.socket_dir_setting = setting or ("--device-plugin-dir", device_plugin_dir)
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def socket_path(self, resource: str) -> Path:
        return socket_path(self.socket_dir, resource, *self.socket_dir_setting)

    def add_servicers(self, server: grpc.aio.Server, resource: str, on_registered: Done) -> None:
        """Nothing: the kubelet only needs the DevicePlugin service."""

    def register(self, resource: str, on_registered: Done) -> None:
        self.cancel(resource)
        # The endpoint is a name: the kubelet joins its own device-plugin directory with it.
        endpoint = self.socket_path(resource).name
        self._tasks[resource] = asyncio.create_task(
            register_until_done(
                self.socket_dir, endpoint, resource, lambda: on_registered(resource)
            )
        )

    def cancel(self, resource: str) -> None:
        task = self._tasks.pop(resource, None)
        if task is not None:
            task.cancel()

    def registering(self, resource: str) -> bool:
        """A Register call for ``resource`` is still under way (retrying)."""
        task = self._tasks.get(resource)
        return task is not None and not task.done()


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
        self.socket_dir = registry_dir(kubelet_root)
        self.socket_dir_setting = ("--kubelet-root", kubelet_root)

    def socket_path(self, resource: str) -> Path:
        return socket_path(self.socket_dir, resource, *self.socket_dir_setting)

    def add_servicers(self, server: grpc.aio.Server, resource: str, on_registered: Done) -> None:
        # The endpoint is the socket's full path: the kubelet dials it as it is.
        endpoint = str(self.socket_path(resource))
        servicer = RegistrationServicer(
            DEVICE_PLUGIN_TYPE, resource, endpoint, [VERSION], lambda: on_registered(resource)
        )
        add_registration(server, servicer)

    def register(self, resource: str, on_registered: Done) -> None:
        """Nothing to call: the watcher registers the socket the server has just created."""

    def cancel(self, resource: str) -> None:
        """Nothing under way to cancel."""

    def registering(self, resource: str) -> bool:
        """Never: there is no call of ours to wait for."""
        return False


def use_plugin_watcher(settings: Settings) -> bool:
    """``auto`` picks the plugin watcher when plugins_registry sits beside the device-plugin dir."""
    if settings.registration != "auto":
        return settings.registration == "plugin-watcher"
    default_dir = settings.kubelet_root / "device-plugins"
    if settings.effective_device_plugin_dir != default_dir:
        return False  # an explicitly moved device-plugin dir means the socket protocol
    return registry_dir(settings.kubelet_root).is_dir()


def choose_registrar(settings: Settings) -> Registrar:
    """The registration mode, decided once at start from the settings and the kubelet's dirs."""
    if use_plugin_watcher(settings):
        return PluginWatcherRegistrar(settings.kubelet_root)
    setting = (
        ("--kubelet-root", settings.kubelet_root)
        if settings.device_plugin_dir is None
        else ("--device-plugin-dir", settings.device_plugin_dir)
    )
    return KubeletSocketRegistrar(settings.effective_device_plugin_dir, setting)
