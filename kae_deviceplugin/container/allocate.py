"""Allocate: what one container gets for the device IDs the kubelet picked. Pure functions.

Environment variables set here never override the pod's own: the kubelet places the pod spec's
env after the device plugins' env, and for a repeated name the container runtime keeps the last.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kae_deviceplugin.api import pb
from kae_deviceplugin.container.cdi import qualified_name
from kae_deviceplugin.container.sysfs_view import CONTAINER_CLASS_DIR, container_pci_dir, view_dir
from kae_deviceplugin.core.engines import ENGINES_BY_NAME
from kae_deviceplugin.core.model import UacceDevice
from kae_deviceplugin.core.views import ResourceView

MAX_IDS_PER_REQUEST = 1024


class AllocationError(Exception):
    """A request the plugin must refuse; ``code`` is the gRPC status name to answer with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class ContainerOptions:
    """How much of the host to give a container beyond its device nodes."""

    sysfs_root: Path
    state_dir: Path
    sysfs_view: bool = True
    uadk_numa_hint: bool = False
    openssl_engines: str | None = None
    cdi: bool = False
    view_problem: str | None = None  # the container view or CDI spec cannot be written: why


def require_view(resource: str, options: ContainerOptions) -> None:
    """Refuse to hand out a view of /sys/class/uacce (or CDI spec) that could not be written."""
    if options.view_problem is not None and (options.sysfs_view or options.cdi):
        raise AllocationError("FAILED_PRECONDITION", f"{resource}: {options.view_problem}")


def resolve_request(view: ResourceView, ids: Sequence[str]) -> tuple[UacceDevice, ...]:
    """The distinct devices behind ``ids``, or an AllocationError naming the offending ID."""
    if not ids:
        raise AllocationError("INVALID_ARGUMENT", f"{view.resource}: empty device request")
    if len(ids) > MAX_IDS_PER_REQUEST:
        raise AllocationError(
            "INVALID_ARGUMENT",
            f"{view.resource}: {len(ids)} device IDs requested, at most {MAX_IDS_PER_REQUEST}",
        )
    if len(set(ids)) != len(ids):
        duplicate = next(i for n, i in enumerate(ids) if i in ids[:n])
        raise AllocationError("INVALID_ARGUMENT", f"{view.resource}: duplicate ID {duplicate!r}")
    devices: dict[str, UacceDevice] = {}
    for device_id in ids:
        advertised = view.by_id.get(device_id)
        if advertised is None:
            raise AllocationError(
                "INVALID_ARGUMENT", f"{view.resource}: unknown device ID {device_id[:80]!r}"
            )
        if not advertised.device.healthy:
            reasons = ", ".join(advertised.device.reasons)
            raise AllocationError(
                "FAILED_PRECONDITION",
                f"{view.resource}: device {device_id} is Unhealthy ({reasons})",
            )
        devices.setdefault(advertised.device.pci_address, advertised.device)
    return tuple(devices.values())


@functools.lru_cache(maxsize=8)
def _real_root(sysfs_root: Path) -> str:
    return str(sysfs_root.resolve())


def host_sysfs_path(path: str, sysfs_root: Path) -> str:
    """The host path the runtime must bind, whatever root the daemon reads sysfs from.

    Discovery records real paths under the resolved root, so this is a prefix swap; the
    resolution is cached because Allocate calls it on every request.
    """
    root = _real_root(sysfs_root)
    if path.startswith(root + "/"):
        return "/sys" + path[len(root) :]
    relative = os.path.relpath(path, root)
    return "/sys" if relative == "." else f"/sys/{relative}"


def container_response(
    engine_name: str, devices: Sequence[UacceDevice], options: ContainerOptions
) -> pb.ContainerAllocateResponse:
    engine = ENGINES_BY_NAME[engine_name]
    response = pb.ContainerAllocateResponse()
    for device in devices:
        if options.cdi:  # the runtime applies the node and the PCI mount from the CDI spec
            response.cdi_devices.append(pb.CDIDevice(name=qualified_name(device)))
            continue
        response.devices.append(
            pb.DeviceSpec(
                container_path=device.dev_node, host_path=device.dev_node, permissions="rw"
            )
        )
    response.envs[f"{engine.env_prefix}_DEVICES"] = ",".join(d.name for d in devices)
    response.envs[f"{engine.env_prefix}_PCI_ADDRESSES"] = ",".join(d.pci_address for d in devices)
    if options.sysfs_view:
        response.mounts.append(
            pb.Mount(
                container_path=CONTAINER_CLASS_DIR,
                host_path=str(view_dir(options.state_dir)),
                read_only=True,
            )
        )
        for device in () if options.cdi else devices:
            response.mounts.append(
                pb.Mount(
                    container_path=container_pci_dir(device),
                    host_path=host_sysfs_path(device.pci_path, options.sysfs_root),
                    read_only=True,
                )
            )
    if options.uadk_numa_hint:
        response.envs.update(uadk_numa_env(engine.uadk_algorithms, devices))
    if options.openssl_engines:
        response.envs["OPENSSL_ENGINES"] = options.openssl_engines
    return response


def uadk_numa_env(algorithms: Sequence[str], devices: Sequence[UacceDevice]) -> dict[str, str]:
    """WD_<ALG>_CTX_NUM asking UADK for one sync and one async context per allocated NUMA node."""
    nodes = sorted({d.numa_node for d in devices if d.numa_node is not None})
    if not nodes:
        return {}
    value = ",".join(f"sync:1@{node},async:1@{node}" for node in nodes)
    return {f"WD_{algorithm}_CTX_NUM": value for algorithm in algorithms}
