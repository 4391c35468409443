"""The only importer of the generated kubelet device-plugin code: constants and converters."""

from __future__ import annotations

from collections.abc import Iterable

from kae_deviceplugin._generated.deviceplugin.v1beta1 import api_pb2 as pb
from kae_deviceplugin._generated.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

__all__ = ["KUBELET_SOCKET", "VERSION", "pb", "pb_grpc"]

VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"


def plugin_options() -> pb.DevicePluginOptions:
    """What every resource offers: preferred allocation, and no PreStartContainer call.

    Sent in RegisterRequest (current kubelets ignore it there) and answered by
    GetDevicePluginOptions (what the kubelet acts on); one value, so the two cannot disagree.
    """
    return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


def device_message(device_id: str, health: str, numa_node: int | None) -> pb.Device:
    """A kubelet Device; topology left empty when the NUMA node is unknown, as the kubelet wants."""
    if numa_node is None:
        return pb.Device(ID=device_id, health=health)
    return pb.Device(
        ID=device_id,
        health=health,
        topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=numa_node)]),
    )


def list_and_watch_response(
    devices: Iterable[tuple[str, str, int | None]],
) -> pb.ListAndWatchResponse:
    return pb.ListAndWatchResponse(devices=[device_message(*d) for d in devices])
