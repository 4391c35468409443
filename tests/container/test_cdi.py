"""CDI mode: a valid spec on disk, and Allocate naming its devices instead of raw specs."""

from __future__ import annotations

import json

import jsonschema  # type: ignore[import-untyped]  # no stubs in the test extras
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
        assert entry["containerEdits"]["deviceNodes"][0]["path"] == "/dev/hisi_hpre-13"
        mount = entry["containerEdits"]["mounts"][0]
        assert mount["containerPath"] == "/run/kae/pci/0000:b9:00.2"
        assert mount["hostPath"].startswith("/sys/devices/pci0000:b8/")
        assert [m.container_path for m in answer.mounts] == ["/sys/class/uacce"]


def test_broken_spec_fails_the_schema() -> None:
    """The schema really checks: a device without a name, or a bad kind, is rejected."""

    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"cdiVersion": "0.6.0", "kind": "kae", "devices": []}, CDI_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        bad = {"cdiVersion": "0.6.0", "kind": "a.com/b", "devices": [{"containerEdits": {}}]}
        jsonschema.validate(bad, CDI_SCHEMA)
