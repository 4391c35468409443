"""CDI mode: a Container Device Interface spec for every KAE device, named in Allocate answers.

With ``--cdi on`` the runtime (containerd, CRI-O) applies each device's edits from the spec in
``<cdi dir>/openfuyao.com-kae.json`` instead of the kubelet applying raw DeviceSpecs and mounts.
Device names are PCI addresses, so ``openfuyao.com/kae=0000:79:00.0`` stays stable across reboots.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from kae_deviceplugin.container.sysfs_view import container_pci_dir
from kae_deviceplugin.core.model import UacceDevice

CDI_VERSION = "0.6.0"
KIND = "openfuyao.com/kae"
SPEC_FILE = "openfuyao.com-kae.json"


def qualified_name(device: UacceDevice) -> str:
    return f"{KIND}={device.pci_address}"


def device_entry(device: UacceDevice, host_pci_dir: str, sysfs_view: bool) -> dict[str, object]:
    edits: dict[str, object] = {
        "deviceNodes": [{"path": device.dev_node, "hostPath": device.dev_node, "permissions": "rw"}]
    }
    if sysfs_view:
        edits["mounts"] = [
            {
                "hostPath": host_pci_dir,
                "containerPath": container_pci_dir(device),
                "options": ["ro", "rbind"],
            }
        ]
    return {"name": device.pci_address, "containerEdits": edits}


def build_spec(entries: Iterable[dict[str, object]]) -> dict[str, object]:
    return {"cdiVersion": CDI_VERSION, "kind": KIND, "devices": list(entries)}


def write_spec(cdi_dir: Path, spec: dict[str, object]) -> bool:
    """Atomically replace the spec file if its content changed; True when written."""
    text = json.dumps(spec, indent=2, sort_keys=True) + "\n"
    path = cdi_dir / SPEC_FILE
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    cdi_dir.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".kae-", suffix=".tmp", dir=cdi_dir)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)
    return True
