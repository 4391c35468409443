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
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType

import grpc

from kae_deviceplugin._generated.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from kae_deviceplugin.testing.kubelet_rules import (
    EmulatedDevice,
    RegistrationRecord,
    Rejection,
    ResourceState,
    all_unhealthy,
    device_from_message,
    register_problem,
)

KUBELET_SOCKET = "kubelet.sock"
DIAL_TIMEOUT = 10.0  # the kubelet's dial-back deadline during Register
PRE_START_TIMEOUT = 30.0  # the kubelet's PreStartContainer deadline
CALL_TIMEOUT = 10.0  # for the other unary calls, so a hung plugin fails a test instead of hanging


@dataclass
class _Plugin:
    """The connection to one registered plugin; replaced by the next Register for the resource."""

    endpoint: str
    channel: grpc.Channel
    stub: api_pb2_grpc.DevicePluginStub
    thread: threading.Thread | None = None
    stream: grpc.CallIterator[api_pb2.ListAndWatchResponse] | None = None


class KubeletEmulator:
    """Serves v1beta1.Registration on `<dir>/kubelet.sock` and watches the plugins that register."""

    def __init__(self, device_plugin_dir: Path, *, dial_timeout: float = DIAL_TIMEOUT) -> None:
        self.directory = Path(device_plugin_dir)
        self.socket_path = self.directory / KUBELET_SOCKET
        self._dial_timeout = dial_timeout
        # An RLock underneath, so predicates given to wait_for may call the accessors.
        self._cond = threading.Condition()
        self._states: dict[str, ResourceState] = {}
        self._plugins: dict[str, _Plugin] = {}
        self._superseded: dict[str, list[_Plugin]] = {}  # connections a newer Register replaced
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
        server.add_insecure_port(f"unix://{self.socket_path}")
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

    # -- calls a kubelet makes to a registered plugin --------------------------------------

    def options(self, resource: str) -> api_pb2.DevicePluginOptions:
        return self._stub(resource).GetDevicePluginOptions(api_pb2.Empty(), timeout=CALL_TIMEOUT)

    def allocate(self, resource: str, ids: Sequence[str]) -> api_pb2.AllocateResponse:
        """Allocate for one container, as the kubelet does."""
        return self.allocate_containers(resource, [ids])

    def allocate_containers(
        self, resource: str, containers: Sequence[Sequence[str]]
    ) -> api_pb2.AllocateResponse:
        """Allocate with several container requests in one call (allowed by the API)."""
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=c) for c in containers]
        )
        return self._stub(resource).Allocate(request, timeout=CALL_TIMEOUT)

    def preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> api_pb2.PreferredAllocationResponse:
        container = api_pb2.ContainerPreferredAllocationRequest(
            available_deviceIDs=available, must_include_deviceIDs=must_include, allocation_size=size
        )
        request = api_pb2.PreferredAllocationRequest(container_requests=[container])
        return self._stub(resource).GetPreferredAllocation(request, timeout=CALL_TIMEOUT)

    def pre_start(self, resource: str, ids: Sequence[str]) -> api_pb2.PreStartContainerResponse:
        request = api_pb2.PreStartContainerRequest(devices_ids=ids)
        return self._stub(resource).PreStartContainer(request, timeout=PRE_START_TIMEOUT)

    def drop_stream(self, resource: str) -> None:
        """End one resource's ListAndWatch stream while the kubelet stays up (it won't re-dial)."""
        with self._cond:
            plugin = self._plugins.get(resource)
        if plugin is None or plugin.stream is None:
            raise KeyError(f"no stream for {resource!r}")
        plugin.stream.cancel()  # type: ignore[no-untyped-call]  # untyped in grpc-stubs

    def _stub(self, resource: str) -> api_pb2_grpc.DevicePluginStub:
        with self._cond:
            plugin = self._plugins.get(resource)
        if plugin is None:
            raise KeyError(f"no plugin is registered for {resource!r}")
        return plugin.stub

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
        channel = grpc.insecure_channel(f"unix://{self.directory / request.endpoint}")
        stub = api_pb2_grpc.DevicePluginStub(channel)
        try:
            # wait_for_ready mirrors the kubelet's blocking dial: keep trying until the deadline.
            options = stub.GetDevicePluginOptions(
                api_pb2.Empty(), timeout=self._dial_timeout, wait_for_ready=True
            )
        except grpc.RpcError as error:
            channel.close()
            return self._reject(request, f"dial-back to {request.endpoint} failed: {error.code()}")
        plugin = _Plugin(request.endpoint, channel, stub)
        with self._cond:
            if epoch != self._epoch:  # the emulator stopped or restarted meanwhile
                channel.close()
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
            stream = stub.ListAndWatch(api_pb2.Empty())
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

    def _watch(
        self,
        resource: str,
        plugin: _Plugin,
        stream: grpc.CallIterator[api_pb2.ListAndWatchResponse],
    ) -> None:
        """Record every ListAndWatch message until the stream ends; never re-dial."""
        try:
            for response in stream:
                devices = tuple(device_from_message(d) for d in response.devices)
                with self._cond:
                    # Like the kubelet, a superseded connection's messages still count.
                    if plugin not in (self._plugins.get(resource), *self._superseded_of(resource)):
                        return
                    state = self._states[resource]
                    self._states[resource] = replace(
                        state,
                        devices=devices,
                        messages=state.messages + 1,
                        updated_at=time.monotonic(),
                    )
                    self._cond.notify_all()
        except grpc.RpcError:
            pass  # cancelled by us, or the plugin went away: both simply end the stream
        finally:
            self._stream_ended(resource, plugin)

    def _superseded_of(self, resource: str) -> list[_Plugin]:
        return self._superseded.get(resource, [])

    def _stream_ended(self, resource: str, plugin: _Plugin) -> None:
        """The kubelet's PluginDisconnected: it acts on the *current* client, whichever stream
        ended."""
        with self._cond:
            current = self._plugins.get(resource)
            if plugin in self._superseded_of(resource):
                self._superseded[resource].remove(plugin)
                plugin.channel.close()
                if current is None:
                    return
                self.disconnects_by_old_streams += 1
            elif current is not plugin:
                return
            state = self._states[resource]
            self._states[resource] = replace(
                state, devices=all_unhealthy(state.devices), stream_ended=True
            )
            self._cond.notify_all()
        if current is not plugin and current is not None and current.stream is not None:
            current.stream.cancel()  # type: ignore[no-untyped-call]  # untyped in grpc-stubs


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
