"""CDI mode: a Container Device Interface spec for every KAE device, named in Allocate answers.

With ``--cdi on`` the runtime (containerd, CRI-O) applies each device's edits from the spec in
``<cdi dir>/openfuyao.com-kae.json`` instead of the kubelet applying raw DeviceSpecs and mounts.
Device names are PCI addresses, so ``openfuyao.com/kae=0000:79:00.0`` stays stable across reboots.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from kae_deviceplugin.container import safe_fs
from kae_deviceplugin.core.model import UacceDevice
from kae_deviceplugin.errors import StartupError

if TYPE_CHECKING:  # edits names devices by qualified_name(): a type-only import, no cycle
    from kae_deviceplugin.container.edits import ContainerEdits as DeviceEdits

CDI_VERSION = "0.6.0"
KIND = "openfuyao.com/kae"
SPEC_FILE = "openfuyao.com-kae.json"


def qualified_name(device: UacceDevice) -> str:
    return f"{KIND}={device.pci_address}"


def device_entry(device: UacceDevice, edits: DeviceEdits) -> dict[str, object]:
    """One device of the spec: its own container edits (``container.edits.device_edits``)."""
    rendered: dict[str, object] = {
        "deviceNodes": [
            {"path": n.container_path, "hostPath": n.host_path, "permissions": n.permissions}
            for n in edits.device_nodes
        ]
    }
    if edits.mounts:
        rendered["mounts"] = [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "options": ["ro", "rbind"] if m.read_only else ["rbind"],
            }
            for m in edits.mounts
        ]
    return {"name": device.pci_address, "containerEdits": rendered}


def build_spec(entries: Iterable[dict[str, object]]) -> dict[str, object]:
    return {"cdiVersion": CDI_VERSION, "kind": KIND, "devices": list(entries)}


def write_spec(cdi_dir: Path, spec: dict[str, object]) -> bool:
    """Atomically replace the spec file if its content changed; True when written.

    Through a descriptor of ``cdi_dir``: a symlink planted as the spec file is replaced, never
    followed or read.
    """
    data = (json.dumps(spec, indent=2, sort_keys=True) + "\n").encode()
    try:
        with safe_fs.open_root(cdi_dir) as fd:
            if safe_fs.read_file(fd, SPEC_FILE) == data:
                return False
            safe_fs.write_file(fd, SPEC_FILE, data, mode=0o644)
    except safe_fs.UnsafePath:
        raise
    except OSError as err:
        raise OSError(f"cannot write the CDI spec {cdi_dir / SPEC_FILE}: {err.strerror}") from err
    return True


def check_cdi_dir(cdi_dir: Path) -> None:
    """A CDI directory this daemon can write, or a refusal in one line."""
    try:
        with safe_fs.open_root(cdi_dir):
            pass
        if not os.access(cdi_dir, os.W_OK):
            raise PermissionError(errno.EACCES, "not writable", str(cdi_dir))
    except OSError as err:
        raise StartupError(
            f"--cdi-dir {cdi_dir}: {err.strerror or err}; it must be a directory this "
            "daemon can write (the container runtime reads claims' CDI specs there)"
        ) from None
