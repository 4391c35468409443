"""The chart's least privilege for VF profiles: the serving container never gets a writable sysfs;
only where a profile is set does the pod get the small vf-writer container, which alone mounts
the host's PCI devices writable, with no capability (skipped without Helm 3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from kae_deviceplugin.config.file import parse_config_text
from kae_deviceplugin.config.resolve import resolve_settings
from tests.deploy.test_configs import rendered
from tests.deploy.test_deploy import CHART, NAMESPACE, Obj, helm_run, of_kind

BASE = "kae-kae-device-plugin"


def render_values(tmp_path: Path, values: dict[str, Any]) -> list[Obj]:
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    out = helm_run("template", "kae", str(CHART), "-n", NAMESPACE, "--values", str(path))
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def containers(daemonset: Obj) -> dict[str, Obj]:
    return {c["name"]: c for c in daemonset["spec"]["template"]["spec"]["containers"]}


def mounts(daemonset: Obj, name: str) -> dict[str, tuple[str, bool]]:
    """hostPath or emptyDir volume -> (mount path, read-only) in container ``name``."""
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    found = {}
    for mount in containers(daemonset)[name]["volumeMounts"]:
        volume = volumes[mount["name"]]
        key = volume["hostPath"]["path"] if "hostPath" in volume else mount["name"]
        found[key] = (mount["mountPath"], bool(mount.get("readOnly")))
    return found


def test_the_default_install_has_no_writer_and_no_writable_sysfs(tmp_path: Path) -> None:
    """No profile anywhere: one container, no /sys mount at all, no vfWriterDir in the file."""
    objs = render_values(tmp_path, {"nfd": {"requireLabel": False}})
    (daemonset,) = of_kind(objs, "DaemonSet")
    assert set(containers(daemonset)) == {"kae-device-plugin"}
    volumes = daemonset["spec"]["template"]["spec"]["volumes"]
    assert not any(v.get("hostPath", {}).get("path", "").startswith("/sys") for v in volumes)
    assert "vfWriterDir" not in of_kind(objs, "ConfigMap")[0]["data"]["config.yaml"]


def test_a_profile_adds_the_writer_with_the_only_writable_sysfs(tmp_path: Path) -> None:
    """sec: 8 in config: the vf-writer container, uid 0 without any capability, read-only root,
    the host's /sys/devices writable and the PCI links read-only; the daemon's container keeps
    no sysfs mount and shares only the request directory, which its config file names."""
    objs = render_values(tmp_path, {"config": {"engines": {"sec": {"vfs": 8}}}})
    (daemonset,) = of_kind(objs, "DaemonSet")
    writer = containers(daemonset)["vf-writer"]
    sc = writer["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["runAsUser"] == 0
    assert writer["command"] == ["kae-deviceplugin", "vf-writer"]
    assert mounts(daemonset, "vf-writer") == {
        "vf-requests": ("/run/kae-vf", False),
        "/sys/bus/pci/devices": ("/host/sys/bus/pci/devices", True),
        "/sys/devices": ("/host/sys/devices", False),
    }
    daemon_mounts = mounts(daemonset, "kae-device-plugin")
    assert not any(path.startswith("/sys") for path in daemon_mounts)
    assert daemon_mounts["vf-requests"] == ("/run/kae-vf", False)
    text = of_kind(objs, "ConfigMap")[0]["data"]["config.yaml"]
    settings = resolve_settings(parse_config_text(text, "config.yaml"), {})
    assert str(settings.vf_writer_dir) == "/run/kae-vf" and settings.engine("sec").vfs == 8
    assert containers(daemonset)["kae-device-plugin"]["securityContext"]["capabilities"] == {
        "drop": ["ALL"]
    }


def test_only_the_configuration_with_a_profile_gets_the_writer(tmp_path: Path) -> None:
    """configs.sec8 sets the profile: its DaemonSet has the writer, the default one has not."""
    objs = rendered(tmp_path, {"sec8": {"engines": {"sec": {"vfs": 8}}}})
    daemonsets = {d["metadata"]["name"]: d for d in of_kind(objs, "DaemonSet")}
    assert set(containers(daemonsets[f"{BASE}-sec8"])) == {"kae-device-plugin", "vf-writer"}
    assert set(containers(daemonsets[BASE])) == {"kae-device-plugin"}
