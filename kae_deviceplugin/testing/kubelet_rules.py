"""The kubelet emulator's pure half: its records, and the checks a kubelet applies to Register.

Kept apart from the emulator's sockets and threads so that they can be tested (and reused) alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kae_deviceplugin._generated.deviceplugin.v1beta1 import api_pb2

API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_MAX_PREFIX = 253
_MAX_NAME = 63


def resource_name_problem(name: str) -> str | None:
    """Why `name` is not an extended resource name the kubelet accepts, or None if it is."""
    if "/" not in name:
        return f"resource name {name!r} must have a domain prefix (vendor.example/name)"
    if "kubernetes.io/" in name:
        return f"resource name {name!r} uses the reserved kubernetes.io namespace"
    if name.startswith("requests."):
        # The kubelet reserves this prefix for quota names ("requests.<resource>").
        return f"resource name {name!r} must not start with 'requests.'"
    prefix, _, rest = name.partition("/")
    if len(prefix) > _MAX_PREFIX or not _DNS_SUBDOMAIN.fullmatch(prefix):
        return f"resource name prefix {prefix!r} is not a DNS subdomain"
    if len(rest) > _MAX_NAME or not _NAME_PART.fullmatch(rest):
        return (
            f"resource name part {rest!r} must be at most {_MAX_NAME} characters of "
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        )
    return None


def endpoint_problem(endpoint: str) -> str | None:
    """Why `endpoint` is not a plain file name inside the device-plugin directory, or None."""
    if endpoint in ("", ".", "..") or "/" in endpoint or "\0" in endpoint:
        return f"endpoint {endpoint!r} must be a file name inside the device-plugin directory"
    return None


def register_problem(request: api_pb2.RegisterRequest, *, via_watcher: bool = False) -> str | None:
    """Why the kubelet would refuse `request` before dialling back, or None.

    Through the plugin watcher the endpoint is the socket's full path, so only a Register call's
    endpoint must be a file name inside the device-plugin directory.
    """
    if request.version != API_VERSION:
        return f"unsupported device plugin API version {request.version!r}, want {API_VERSION!r}"
    endpoint = None if via_watcher else endpoint_problem(request.endpoint)
    return resource_name_problem(request.resource_name) or endpoint


@dataclass(frozen=True)
class EmulatedDevice:
    """One device as last reported by ListAndWatch."""

    id: str
    health: str
    numa_nodes: tuple[int, ...] = ()

    @property
    def healthy(self) -> bool:
        # The kubelet counts anything but the exact string "Healthy" as unhealthy.
        return self.health == HEALTHY


@dataclass(frozen=True)
class RegistrationRecord:
    """An accepted Register call."""

    resource: str
    endpoint: str
    options: api_pb2.DevicePluginOptions  # as answered by GetDevicePluginOptions on dial-back
    requested_options: api_pb2.DevicePluginOptions  # as sent in RegisterRequest (kubelet ignores)
    time: float  # time.monotonic()


@dataclass(frozen=True)
class Rejection:
    """A Register call the emulator refused, and why."""

    resource: str
    endpoint: str
    reason: str
    time: float


@dataclass(frozen=True)
class ResourceState:
    """What the emulated kubelet knows about one resource."""

    devices: tuple[EmulatedDevice, ...] = ()
    messages: int = 0  # ListAndWatch messages received for this resource, over all streams
    updated_at: float | None = None  # time.monotonic() of the last message
    stream_ended: bool = False  # the current registration's stream is over


def device_from_message(device: api_pb2.Device) -> EmulatedDevice:
    return EmulatedDevice(device.ID, device.health, tuple(n.ID for n in device.topology.nodes))


def all_unhealthy(devices: tuple[EmulatedDevice, ...]) -> tuple[EmulatedDevice, ...]:
    return tuple(EmulatedDevice(d.id, UNHEALTHY, d.numa_nodes) for d in devices)
