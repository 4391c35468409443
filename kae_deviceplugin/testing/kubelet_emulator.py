"""A kubelet device manager emulator, written from the published device-plugin contract.

Tests, benchmarks and the `demo` command drive a device plugin against it over real unix sockets.
It reproduces the kubelet behaviours a plugin has to survive: validation and dial-back during
Register, one ListAndWatch stream per registration that is never re-dialled, devices turning
unhealthy when that stream ends, and a restart that deletes every socket in the directory.

It also keeps the kubelet's quirk of kubernetes issue 121994: a second Register for a connected
resource does not close the first connection, whose stream goes on feeding the device list, and
when that older stream ends the kubelet disconnects the *current* client of the resource.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import replace
from pathlib import Path
from types import TracebackType

import grpc

from kae_deviceplugin._generated.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from kae_deviceplugin.testing.kubelet_calls import PluginCalls
from kae_deviceplugin.testing.kubelet_rules import (
    EmulatedDevice,
    RegistrationRecord,
    Rejection,
    ResourceState,
    all_unhealthy,
    register_problem,
)
from kae_deviceplugin.testing.kubelet_streams import Plugin, StreamWatching, dial_back

KUBELET_SOCKET = "kubelet.sock"
DIAL_TIMEOUT = 10.0  # the kubelet's dial-back deadline during Register


class KubeletEmulator(PluginCalls, StreamWatching):
    """Serves v1beta1.Registration on `<dir>/kubelet.sock` and watches the plugins that register."""

    def __init__(self, device_plugin_dir: Path, *, dial_timeout: float = DIAL_TIMEOUT) -> None:
        self.directory = Path(device_plugin_dir)
        self.socket_path = self.directory / KUBELET_SOCKET
        self._dial_timeout = dial_timeout
        # An RLock underneath, so predicates given to wait_for may call the accessors.
        self._cond = threading.Condition()
        self._states: dict[str, ResourceState] = {}
        self._plugins: dict[str, Plugin] = {}
        self._superseded: dict[str, list[Plugin]] = {}  # connections a newer Register replaced
        self.disconnects_by_old_streams = 0  # times the issue-121994 quirk struck
        self._registrations: list[RegistrationRecord] = []
        self._rejections: list[Rejection] = []
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._epoch = 0  # bumped on stop/restart so that in-flight Registers are discarded

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start like a kubelet does: delete every socket in the directory, then serve."""
        self.directory.mkdir(parents=True, exist_ok=True)
        remove_sockets(self.directory)
        self._executor = futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="kubelet")
        server = grpc.server(self._executor)
        api_pb2_grpc.add_RegistrationServicer_to_server(_RegistrationService(self), server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        server.start()
        with self._cond:
            self._server = server
            self._cond.notify_all()

    def restart(self) -> None:
        """Emulate a kubelet restart: all sockets go away, streams end, capacity drops to zero."""
        self._stop_server()
        remove_sockets(self.directory)
        self._end_streams(forget_devices=True)
        self.start()

    def stop(self) -> None:
        """Stop serving, end every stream and remove kubelet.sock."""
        self._stop_server()
        self._end_streams(forget_devices=False)
        self.socket_path.unlink(missing_ok=True)

    def __enter__(self) -> KubeletEmulator:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _stop_server(self) -> None:
        with self._cond:
            server, self._server = self._server, None
            self._epoch += 1
        if server is not None:
            server.stop(grace=None).wait()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    def _end_streams(self, *, forget_devices: bool) -> None:
        with self._cond:
            plugins, self._plugins = self._plugins, {}
            superseded, self._superseded = self._superseded, {}
        for plugin in [*plugins.values(), *(p for old in superseded.values() for p in old)]:
            plugin.channel.close()  # cancels the ListAndWatch call; its thread then exits
            if plugin.thread is not None:
                plugin.thread.join(timeout=5.0)
        with self._cond:
            for name, state in self._states.items():
                # After a real restart the kubelet knows the resource but has no devices for it.
                devices = () if forget_devices else all_unhealthy(state.devices)
                self._states[name] = replace(state, devices=devices, stream_ended=True)
            self._cond.notify_all()

    # -- snapshots -------------------------------------------------------------------------

    def resources(self) -> dict[str, list[EmulatedDevice]]:
        """Each known resource's current device list."""
        with self._cond:
            return {name: list(state.devices) for name, state in self._states.items()}

    def state(self, resource: str) -> ResourceState | None:
        """Devices, message count, last update and stream status of one resource."""
        with self._cond:
            return self._states.get(resource)

    @property
    def registrations(self) -> list[RegistrationRecord]:
        with self._cond:
            return list(self._registrations)

    @property
    def rejections(self) -> list[Rejection]:
        with self._cond:
            return list(self._rejections)

    @property
    def serving(self) -> bool:
        with self._cond:
            return self._server is not None

    def wait_for(self, predicate: Callable[[KubeletEmulator], bool], timeout: float) -> bool:
        """Wait until `predicate(self)` holds; False if it still does not after `timeout` s."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout)

    # -- Register --------------------------------------------------------------------------

    def register(
        self, request: api_pb2.RegisterRequest, *, via_watcher: bool = False
    ) -> str | None:
        """What the kubelet does with a Register, or with a plugin its plugin watcher found."""
        return self._register(request, via_watcher=via_watcher)

    def _register(
        self, request: api_pb2.RegisterRequest, *, via_watcher: bool = False
    ) -> str | None:
        """Handle one Register; returns the reason for refusing it, or None when accepted."""
        with self._cond:
            epoch = self._epoch
        reason = register_problem(request, via_watcher=via_watcher)
        if reason is not None:
            return self._reject(request, reason)
        dialled = dial_back(self.directory, request.endpoint, self._dial_timeout)
        if isinstance(dialled, str):
            return self._reject(request, dialled)
        plugin, options = dialled
        with self._cond:
            if epoch != self._epoch:  # the emulator stopped or restarted meanwhile
                plugin.channel.close()
                return "kubelet restarted during registration"
            old = self._plugins.get(request.resource_name)
            self._plugins[request.resource_name] = plugin
            previous = self._states.get(request.resource_name, ResourceState())
            self._states[request.resource_name] = replace(previous, stream_ended=False)
            self._registrations.append(
                RegistrationRecord(
                    request.resource_name,
                    request.endpoint,
                    options,
                    request.options,
                    time.monotonic(),
                )
            )
            # Like the kubelet, start watching concurrently with the reply to Register. The call
            # is made here, under the lock, so that _end_streams can always cancel it.
            stream = plugin.stub.ListAndWatch(api_pb2.Empty())
            plugin.stream = stream
            plugin.thread = threading.Thread(
                target=self._watch,
                args=(request.resource_name, plugin, stream),
                name=f"emulator-watch-{request.resource_name}",
                daemon=True,
            )
            plugin.thread.start()
            self._cond.notify_all()
            if old is not None and old.thread is not None and old.thread.is_alive():
                # Not closed, as the kubelet does not close it: its stream goes on.
                self._superseded.setdefault(request.resource_name, []).append(old)
            elif old is not None:
                old.channel.close()  # its stream had ended already
        return None

    def _reject(self, request: api_pb2.RegisterRequest, reason: str) -> str:
        with self._cond:
            rejection = Rejection(request.resource_name, request.endpoint, reason, time.monotonic())
            self._rejections.append(rejection)
            self._cond.notify_all()
        return reason


class _RegistrationService(api_pb2_grpc.RegistrationServicer):
    def __init__(self, kubelet: KubeletEmulator) -> None:
        self._kubelet = kubelet

    def Register(
        self, request: api_pb2.RegisterRequest, context: grpc.ServicerContext
    ) -> api_pb2.Empty:
        reason = self._kubelet._register(request)
        if reason is not None:
            # The kubelet answers with a plain Go error, which gRPC reports as UNKNOWN.
            context.abort(grpc.StatusCode.UNKNOWN, reason)
        return api_pb2.Empty()


def remove_sockets(directory: Path) -> None:
    """Delete every unix socket directly inside `directory`, as a starting kubelet does."""
    for entry in os.scandir(directory):
        try:
            is_socket = stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode)
        except FileNotFoundError:  # a plugin replaced it meanwhile; it will be seen next time
            continue
        if is_socket:
            Path(entry.path).unlink(missing_ok=True)
