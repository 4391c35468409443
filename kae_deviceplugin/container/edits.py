"""What a container gets for a set of devices, built once as a plain value.

``container_edits`` decides the device nodes, mounts, environment and CDI names; the kubelet
front end renders the value into an Allocate answer, and the CDI spec writer renders each
device's part of it into the spec. A second front end (Dynamic Resource Allocation) renders the
same value its own way; nothing here knows about protobuf or JSON.

Host paths name what the container runtime must find on the host: by default the paths under the
roots the daemon reads (on a node, ``/sys`` and ``/dev``), or, where the daemon sees the host's
directories under another prefix, under ``host_sysfs_root`` and ``host_dev_root``.

Environment variables set here never override the pod's own: the kubelet places the pod spec's
env after the device plugins' env, and for a repeated name the container runtime keeps the last.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kae_deviceplugin.container import openssl_conf
from kae_deviceplugin.container.cdi import qualified_name
from kae_deviceplugin.container.openssl_conf import conf_dir
from kae_deviceplugin.container.sysfs_view import CONTAINER_CLASS_DIR, container_pci_dir, view_dir
from kae_deviceplugin.container.uadk import uadk_numa_env
from kae_deviceplugin.core.engines import ENGINES_BY_NAME
from kae_deviceplugin.core.model import UacceDevice

CONTAINER_DEV_DIR = "/dev"  # where UADK opens /dev/<name>, whatever the host calls it


@dataclass(frozen=True, slots=True)
class ContainerOptions:
    """How much of the host to give a container beyond its device nodes, and where it lives."""

    sysfs_root: Path  # where the daemon reads sysfs
    state_dir: Path
    sysfs_view: bool = True
    uadk_numa_hint: bool = False
    openssl_engines: str | None = None
    openssl_conf: bool = False  # OPENSSL_CONF and its file's directory (container.openssl_conf)
    cdi: bool = False
    host_sysfs_root: Path | None = None  # the host's name for sysfs_root; None: the same
    dev_root: Path = Path("/dev")  # where the daemon sees the device nodes
    host_dev_root: Path | None = None  # the host's name for dev_root; None: the same
    view_problem: str | None = None  # the container view or CDI spec cannot be written: why


@dataclass(frozen=True, slots=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True, slots=True)
class BindMount:
    container_path: str
    host_path: str
    read_only: bool = True


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    """Everything one container gets, in the order the kubelet and runtimes apply it."""

    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[BindMount, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cdi_devices: tuple[str, ...] = ()


@functools.lru_cache(maxsize=8)
def _real_root(sysfs_root: Path) -> str:
    return str(sysfs_root.resolve())


def host_sysfs_path(path: str, options: ContainerOptions) -> str:
    """The host path of a sysfs path discovery recorded (a real path under the resolved root).

    A prefix swap; the root's resolution is cached because Allocate calls this on every request.
    """
    root = _real_root(options.sysfs_root)
    host_root = str(options.host_sysfs_root or options.sysfs_root).rstrip("/") or "/"
    relative = path[len(root) + 1 :] if path.startswith(root + "/") else os.path.relpath(path, root)
    if relative in ("", "."):
        return host_root
    return f"{host_root}/{relative}" if host_root != "/" else f"/{relative}"


def host_dev_path(device: UacceDevice, options: ContainerOptions) -> str:
    """The host path of a device's /dev node."""
    return f"{options.host_dev_root or options.dev_root}/{device.name}"


def device_edits(device: UacceDevice, options: ContainerOptions) -> ContainerEdits:
    """One device's own edits: its /dev node, and its PCI function for the sysfs view."""
    node = DeviceNode(f"{CONTAINER_DEV_DIR}/{device.name}", host_dev_path(device, options))
    mounts: tuple[BindMount, ...] = ()
    if options.sysfs_view:
        pci = host_sysfs_path(device.pci_path, options)
        mounts = (BindMount(container_pci_dir(device), pci),)
    return ContainerEdits(device_nodes=(node,), mounts=mounts)


def container_edits(
    engine_name: str,
    devices: Sequence[UacceDevice],
    options: ContainerOptions,
    queues: Mapping[str, int] | None = None,
) -> ContainerEdits:
    """The edits of one container given ``devices`` of one engine.

    ``queues`` (DRA, a shared device: PCI address -> the queues the claim holds) adds
    ``KAE_<ENGINE>_QUEUES`` (one count per device, in ``_DEVICES`` order) and sizes UADK's
    ``WD_*_CTX_NUM`` to them; those are set whatever ``uadk_numa_hint`` says, being the only
    way the share reaches UADK.
    """
    engine = ENGINES_BY_NAME[engine_name]
    nodes: list[DeviceNode] = []
    mounts: list[BindMount] = []
    if options.sysfs_view:  # the node-wide directory of links, the same in every answer
        mounts.append(BindMount(CONTAINER_CLASS_DIR, str(view_dir(options.state_dir))))
    cdi_names: tuple[str, ...] = ()
    if options.cdi:  # the runtime applies each device's own edits from the CDI spec
        cdi_names = tuple(qualified_name(d) for d in devices)
    else:
        for device in devices:
            own = device_edits(device, options)
            nodes += own.device_nodes
            mounts += own.mounts
    env = [
        (f"{engine.env_prefix}_DEVICES", ",".join(d.name for d in devices)),
        (f"{engine.env_prefix}_PCI_ADDRESSES", ",".join(d.pci_address for d in devices)),
    ]
    shared = queues is not None and all(d.pci_address in queues for d in devices)
    if shared and queues is not None:
        counts = ",".join(str(queues[d.pci_address]) for d in devices)
        env.append((f"{engine.env_prefix}_QUEUES", counts))
        env += sorted(uadk_numa_env(devices, queues).items())
    elif options.uadk_numa_hint:
        env += sorted(uadk_numa_env(devices).items())
    if options.openssl_engines:
        env.append(("OPENSSL_ENGINES", options.openssl_engines))
    if options.openssl_conf:  # the same node-wide file for every container: mounted read-only
        mounts.append(BindMount(openssl_conf.CONTAINER_DIR, str(conf_dir(options.state_dir))))
        env.append(("OPENSSL_CONF", openssl_conf.CONTAINER_FILE))
    return ContainerEdits(tuple(nodes), tuple(mounts), tuple(env), cdi_names)
