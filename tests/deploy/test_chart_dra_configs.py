"""The chart's DRA mode with per-node configurations, psa.enabled, and the validators: each
configuration's DaemonSet gets the same DRA parts, a configuration's mode moves its nodes either
way, and every rendered object passes kubernetes-validate (1.34, the first serving
resource.k8s.io/v1, and the newest) and `helm lint --strict` (skipped without Helm 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_chart_dra import DRA, DRA_KINDS, DRA_VALUES, daemonsets, is_dra
from tests.deploy.test_deploy import (
    CHART,
    NAMESPACE,
    Obj,
    helm_run,
    latest_kubernetes,
    of_kind,
    one,
    render,
)


def rendered(tmp_path: Path, values: dict[str, Any]) -> list[Obj]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    out = helm_run("template", "kae", str(CHART), "-n", NAMESPACE, "--values", str(path))
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def test_every_configuration_gets_the_dra_parts(tmp_path: Path) -> None:
    """dra.enabled with configs: each DaemonSet is in DRA mode with the same mounts (its own
    config settings aside), each ConfigMap says mode: dra; one set of cluster objects."""
    configs = {
        "vf-only": {"engines": {"sec": {"functions": "vf"}}},
        "shared": {"scanInterval": "5s"},
    }
    objs = rendered(tmp_path, {"dra": {"enabled": True}, "configs": configs})
    sets = daemonsets(objs)
    assert len(sets) == 3 and all(is_dra(d) for d in sets.values())
    volumes = {
        name: sorted(
            v["hostPath"]["path"]
            for v in d["spec"]["template"]["spec"]["volumes"]
            if "hostPath" in v
        )
        for name, d in sets.items()
    }
    assert len({json.dumps(v) for v in volumes.values()}) == 1, volumes
    for config_map in of_kind(objs, "ConfigMap"):
        assert yaml.safe_load(config_map["data"]["config.yaml"])["mode"] == "dra"
    assert len(of_kind(objs, "ClusterRole")) == 1 and len(of_kind(objs, "DeviceClass")) == 3


def test_a_configuration_moves_its_nodes_to_dra(tmp_path: Path) -> None:
    """configs.<name>.mode=dra alone: that DaemonSet runs DRA, the default keeps the device
    plugin, and the cluster objects come with the one DRA DaemonSet (the migration setup)."""
    objs = rendered(tmp_path, {"configs": {"dra": {"mode": "dra"}}})
    sets = daemonsets(objs)
    assert {name: is_dra(d) for name, d in sets.items()} == {
        "kae-kae-device-plugin": False,
        "kae-kae-device-plugin-dra": True,
    }
    assert {o["kind"] for o in objs} >= DRA_KINDS
    modes = {
        c["metadata"]["name"]: yaml.safe_load(c["data"]["config.yaml"]).get("mode")
        for c in of_kind(objs, "ConfigMap")
    }
    assert modes == {"kae-kae-device-plugin": None, "kae-kae-device-plugin-dra": "dra"}


def test_a_configuration_keeps_its_nodes_on_the_device_plugin(tmp_path: Path) -> None:
    """dra.enabled with configs.<name>.mode=device-plugin: that DaemonSet keeps the device
    plugin's mounts, no token, and its own rolling update."""
    objs = rendered(
        tmp_path, {"dra": {"enabled": True}, "configs": {"legacy": {"mode": "device-plugin"}}}
    )
    legacy = daemonsets(objs)["kae-kae-device-plugin-legacy"]
    assert not is_dra(legacy)
    paths = {
        v["hostPath"]["path"]
        for v in legacy["spec"]["template"]["spec"]["volumes"]
        if "hostPath" in v
    }
    assert {"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources"} <= paths
    assert legacy["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 1}
    assert is_dra(daemonsets(objs)["kae-kae-device-plugin"])


def test_only_device_plugin_configurations_render_no_dra_objects(tmp_path: Path) -> None:
    """Every DaemonSet in device-plugin mode (dra.enabled, but every node configured back):
    no DRA object at all, since no driver would use it. A configuration's empty mode follows
    dra.enabled, as config.mode's does, and so brings them back."""
    values: dict[str, Any] = {
        "dra": {"enabled": True},
        "config": {"mode": "device-plugin"},
        "configs": {"x": {"engines": {"hpre": {"shares": 2}}}},
    }
    objs = rendered(tmp_path / "back", values)
    assert not any(is_dra(d) for d in daemonsets(objs).values())
    assert not DRA_KINDS & {o["kind"] for o in objs}
    values["configs"]["x"]["mode"] = ""
    objs = rendered(tmp_path / "empty", values)
    assert {n: is_dra(d) for n, d in daemonsets(objs).items()} == {
        "kae-kae-device-plugin": False,
        "kae-kae-device-plugin-x": True,
    }
    assert {o["kind"] for o in objs} >= DRA_KINDS


def test_a_mode_the_daemon_does_not_have_is_refused() -> None:
    """config.mode and a configuration's mode are device-plugin, dra, auto or empty, and the
    refusal names the value where it was written and says so."""
    for bad, where in (
        ("config.mode=both", "config.mode"),
        ("configs.x.mode=DRA-ish", "configs.x.mode"),
    ):
        out = helm_run("template", "kae", str(CHART), "--set", bad)
        value = bad.partition("=")[2]
        want = f'{where}: "{value}" must be one of device-plugin, dra, auto, or empty'
        assert out.returncode != 0 and want in out.stderr, out.stderr


def test_psa_puts_every_namespaced_dra_object_in_the_plugin_namespace() -> None:
    """With psa.enabled the DRA DaemonSet and account live in psa.namespace like the rest."""
    objs = render(DRA_VALUES, namespace="default")
    for obj in objs:
        if obj["kind"] in DRA_KINDS or obj["kind"] == "Namespace":
            continue
        assert obj["metadata"]["namespace"] == "kae-plugin", obj["kind"]


def test_helm_lint_strict_passes_for_dra_values() -> None:
    """`helm lint --strict` (schema included) is clean for ci/dra-values.yaml."""
    out = helm_run(
        "lint", "--strict", str(CHART), "--namespace", NAMESPACE, "--values", str(DRA_VALUES)
    )
    assert out.returncode == 0, out.stdout + out.stderr


def kubernetes_validate(objs: list[Obj], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    cmd = [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet"]
    cmd += ["-k", "1.34.0", "-k", latest_kubernetes(), str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("sets", [(DRA,), (DRA, "cdi.enabled=true", "metrics.bindPodIP=true")])
def test_dra_objects_pass_kubernetes_validate(sets: tuple[str, ...], tmp_path: Path) -> None:
    """kubernetes-validate --strict knows DeviceClass (resource.k8s.io/v1) and the admission
    policy (admissionregistration.k8s.io/v1) at 1.34 and the newest, and accepts all."""
    out = kubernetes_validate(render(None, *sets), tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    out = kubernetes_validate(render(DRA_VALUES), tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def _broken(kind: str, mutate: Callable[[Obj], None]) -> list[Obj]:
    objs: list[Obj] = json.loads(json.dumps(render(None, DRA)))
    mutate(of_kind(objs, kind)[0])
    return objs


@pytest.mark.parametrize(
    ("kind", "mutate"),
    [
        ("DeviceClass", lambda o: o["spec"].update(extendedResource="x")),
        ("ValidatingAdmissionPolicy", lambda o: o["spec"]["validations"][0].pop("expression")),
        ("ValidatingAdmissionPolicyBinding", lambda o: o["spec"].update(policy="x")),
        ("ClusterRoleBinding", lambda o: o.pop("roleRef")),
    ],
    ids=["deviceclass-unknown-field", "vap-expression", "vapb-unknown-field", "crb-roleref"],
)
def test_kubernetes_validate_fails_on_a_broken_dra_object(
    kind: str, mutate: Callable[[Obj], None], tmp_path: Path
) -> None:
    """The validator really has these kinds' schemas: a broken one fails it."""
    out = kubernetes_validate(_broken(kind, mutate), tmp_path)
    assert out.returncode != 0, f"{kind} passed broken"


def test_one_daemonset_per_node_in_dra_mode_too() -> None:
    """The DRA DaemonSet keeps the opt-out label and its selector: a node serves one mode."""
    spec = one(render(None, DRA), "DaemonSet")["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for e in terms["nodeSelectorTerms"][0]["matchExpressions"]}
    assert "openfuyao.com/kae.deploy.device-plugin" in keys
