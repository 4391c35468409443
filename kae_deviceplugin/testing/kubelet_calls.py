"""The calls a kubelet makes to a registered plugin (Allocate, GetPreferredAllocation, ...),
for the kubelet emulator; each with the kubelet's deadline, so a hung plugin fails a test."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from kae_deviceplugin._generated.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from kae_deviceplugin.testing.kubelet_streams import Plugin

PRE_START_TIMEOUT = 30.0  # the kubelet's PreStartContainer deadline
CALL_TIMEOUT = 10.0  # for the other unary calls, so a hung plugin fails a test instead of hanging


class PluginCalls:
    """Calls on the plugin registered for a resource (KeyError when there is none)."""

    _cond: threading.Condition
    _plugins: dict[str, Plugin]

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
