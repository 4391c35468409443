"""CDI mode: a valid spec on disk, and Allocate naming its devices instead of raw specs."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from kae_deviceplugin.container.cdi import SPEC_FILE
from tests.support.harness import running_node

HPRE = "openfuyao.com/kae.hpre"

# The CDI specification's required fields and name rules (spec v0.6), written out here.
CDI_SCHEMA = {
    "type": "object",
    "required": ["cdiVersion", "kind", "devices"],
    "properties": {
        "cdiVersion": {"type": "string", "pattern": r"^0\.[3-8]\.0$"},
        "kind": {
            "type": "string",
            "pattern": r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?$",
        },
        "devices": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "containerEdits"],
                "properties": {
                    "name": {"type": "string", "pattern": r"^[a-zA-Z0-9][a-zA-Z0-9_.:-]*$"},
                    "containerEdits": {
                        "type": "object",
                        "minProperties": 1,
                        "properties": {
                            "deviceNodes": {
                                "type": "array",
                                "items": {"type": "object", "required": ["path"]},
                            },
                            "mounts": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["hostPath", "containerPath"],
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_cdi_spec_is_valid_and_allocate_names_its_devices() -> None:
    """--cdi on: the spec lists every device; Allocate returns CDI names, not DeviceSpecs."""
    with running_node("kunpeng920-2p-vfs", cdi=True) as node:
        assert node.wait_registered()
        spec_path = node.daemon.settings.cdi_dir / SPEC_FILE
        spec = json.loads(spec_path.read_text())
        jsonschema.validate(spec, CDI_SCHEMA)
        names = {d["name"] for d in spec["devices"]}
        assert len(names) == 18
        answer = node.kubelet.allocate(HPRE, ["0000:b9:00.2"]).container_responses[0]
        assert [c.name for c in answer.cdi_devices] == ["openfuyao.com/kae=0000:b9:00.2"]
        assert list(answer.devices) == []
        assert answer.envs["KAE_HPRE_DEVICES"] == "hisi_hpre-13"
        entry = next(d for d in spec["devices"] if d["name"] == "0000:b9:00.2")
        node_edit = entry["containerEdits"]["deviceNodes"][0]
        assert node_edit["path"] == "/dev/hisi_hpre-13"
        # Host paths name what the runtime finds: here the fixture tree the daemon reads.
        assert node_edit["hostPath"] == f"{node.root}/dev/hisi_hpre-13"
        mount = entry["containerEdits"]["mounts"][0]
        assert mount["containerPath"] == "/run/kae/pci/0000:b9:00.2"
        assert mount["hostPath"] == f"{node.root}/sys/devices/pci0000:b8/0000:b8:00.0/0000:b9:00.2"
        assert [m.container_path for m in answer.mounts] == ["/sys/class/uacce"]


def test_broken_spec_fails_the_schema() -> None:
    """The schema really checks: a device without a name, or a bad kind, is rejected."""

    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"cdiVersion": "0.6.0", "kind": "kae", "devices": []}, CDI_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        bad = {"cdiVersion": "0.6.0", "kind": "a.com/b", "devices": [{"containerEdits": {}}]}
        jsonschema.validate(bad, CDI_SCHEMA)


def test_host_roots_rename_the_paths_answers_name() -> None:
    """Where the daemon sees the host's /sys and /dev under another prefix, the answers and the
    spec name the host's own paths (hostSysfsRoot, hostDevRoot); container paths never change."""
    pci = "/sys/devices/pci0000:78/0000:78:00.0/0000:79:00.0"
    with running_node(cdi=True, host_sysfs_root=Path("/sys"), host_dev_root=Path("/dev")) as node:
        assert node.wait_registered()
        spec = json.loads((node.daemon.settings.cdi_dir / SPEC_FILE).read_text())
        entry = next(d for d in spec["devices"] if d["name"] == "0000:79:00.0")
        assert entry["containerEdits"]["deviceNodes"][0]["hostPath"] == "/dev/hisi_hpre-2"
        assert entry["containerEdits"]["mounts"][0]["hostPath"] == pci
    with running_node(host_sysfs_root=Path("/sys"), host_dev_root=Path("/dev")) as node:
        assert node.wait_registered()
        answer = node.kubelet.allocate(HPRE, ["0000:79:00.0"]).container_responses[0]
        assert [(d.container_path, d.host_path) for d in answer.devices] == [
            ("/dev/hisi_hpre-2", "/dev/hisi_hpre-2")
        ]
        assert [m.host_path for m in answer.mounts][1:] == [pci]
