"""The chart with ``config.mode=auto``: pods that can run either front end, the DRA objects
where the cluster can serve them, exactly the access auto adds (its Node: get and patch; the
DeviceClasses: get; Events in ``default``: create), and the admission policy that keeps each
daemon to its own Node's label and annotation (its CEL run with cel-python, as the slices
policy's tests run theirs)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.test_chart_dra import DRA_KINDS, daemonsets, env_of, is_dra
from tests.deploy.test_chart_dra_configs import kubernetes_validate
from tests.deploy.test_chart_dra_policy import admit, request
from tests.deploy.test_chart_options import rendered_notes
from tests.deploy.test_deploy import (
    CHART,
    NAMESPACE,
    REPO,
    Obj,
    daemon_config,
    helm_run,
    of_kind,
    one,
    pod_spec,
    render,
)

AUTO = "config.mode=auto"
LABEL = "openfuyao.com/kae.mode"
ANNOTATION = "openfuyao.com/kae.mode-reason"


def rules_of(role: Obj) -> dict[tuple[str, str], list[str]]:
    return {
        (group, resource): sorted(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def named(objs: list[Obj], kind: str, suffix: str) -> Obj:
    [found] = [o for o in of_kind(objs, kind) if o["metadata"]["name"].endswith(suffix)]
    return found


def test_auto_pods_can_run_either_front_end() -> None:
    """A token and the node's name (the API at start), KAE_DP_MODE=auto and the state directory
    for doctor and list (they read the recorded choice), the
    device-plugin directory and the DRA driver's own, plugins_registry, the CDI directory
    and the runtime's config (read to choose); no surge (a device plugin cannot run twice)."""
    objs = render(None, AUTO)
    spec = pod_spec(objs)
    assert spec["automountServiceAccountToken"] is True
    env = env_of(objs)
    assert env["KAE_DP_MODE"]["value"] == "auto"
    assert env["KAE_DP_STATE_DIR"]["value"] == "/var/lib/kae-deviceplugin"  # list, doctor
    assert {"NODE_NAME", "POD_UID"} <= set(env)
    mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert {
        "/var/lib/kubelet/device-plugins",
        "/var/lib/kubelet/plugins/kae.openfuyao.com",
        "/var/lib/kubelet/plugins_registry",
        "/var/run/cdi",
        "/etc/containerd",
        "/etc/isulad",
    } <= mounts
    strategy = one(objs, "DaemonSet")["spec"]["updateStrategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}


def test_auto_config_file_is_accepted_by_the_daemon(tmp_path: Path) -> None:
    """mode: auto and its bias (any case in values, lower case in the file), config.dra passed
    through (the daemon may run DRA), and check-config takes the file."""
    objs = render(None, AUTO, "config.autoPrefer=Device-Plugin", "config.dra.sharedEngines=zip")
    config = daemon_config(objs)
    assert config["mode"] == "auto"
    assert config["autoPrefer"].strip().lower() == "device-plugin"
    assert config["dra"] == {"sharedEngines": "zip"}
    path = tmp_path / "config.yaml"
    path.write_text(one(objs, "ConfigMap")["data"]["config.yaml"])
    out = subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", "check-config", str(path)],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_auto_grants_exactly_what_choosing_and_saying_it_takes() -> None:
    """The -auto ClusterRole: nodes get and patch, DeviceClasses get; a Role in default (where
    Node events live): events create; both bound to the pods' account. Nothing else."""
    objs = render(None, AUTO)
    role = named(objs, "ClusterRole", "-auto")
    assert rules_of(role) == {
        ("", "nodes"): ["get", "patch"],
        ("resource.k8s.io", "deviceclasses"): ["get"],
    }
    events = one(objs, "Role")
    assert events["metadata"]["namespace"] == "default"
    assert rules_of(events) == {("", "events"): ["create"]}
    for binding in (named(objs, "ClusterRoleBinding", "-auto"), one(objs, "RoleBinding")):
        [subject] = binding["subjects"]
        assert (subject["name"], subject["namespace"]) == ("kae-kae-device-plugin", NAMESPACE)


def test_auto_brings_the_dra_objects_on_134_and_none_below() -> None:
    """On 1.37 auto may choose DRA: the DRA role, policies and DeviceClasses (with
    extendedResourceName, so limits: pods run on DRA nodes). On 1.33 no node can: none of them,
    and the chart renders (unlike dra.enabled) with auto's own RBAC."""
    kinds = {o["kind"] for o in render(None, AUTO)}
    assert kinds >= DRA_KINDS
    for device_class in of_kind(render(None, AUTO), "DeviceClass"):
        engine = device_class["metadata"]["name"].partition(".")[0]
        assert device_class["spec"]["extendedResourceName"] == f"openfuyao.com/kae.{engine}"
    out = helm_run("template", "kae", str(CHART), "-n", NAMESPACE, "--set", AUTO,
                   "--kube-version", "1.33.13")  # fmt: skip
    assert out.returncode == 0, out.stderr
    objs = [doc for doc in yaml.safe_load_all(out.stdout) if doc]
    assert "DeviceClass" not in {o["kind"] for o in objs}
    assert [r["metadata"]["name"] for r in of_kind(objs, "ClusterRole")] == [
        "kae-kae-device-plugin-auto"
    ]
    assert len(of_kind(objs, "ValidatingAdmissionPolicy")) == 1  # the Node policy alone


def test_auto_per_node_configuration_leaves_the_others_alone() -> None:
    """configs.<name>.mode=auto makes that DaemonSet auto; the default one keeps the device
    plugin, with no token."""
    objs = render(None, "configs.mixed.mode=auto")
    sets = daemonsets(objs)
    assert {name: is_dra(d) for name, d in sets.items()} == {
        "kae-kae-device-plugin": False,
        "kae-kae-device-plugin-mixed": True,
    }
    assert named(objs, "ClusterRole", "-auto")


def node(name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> Obj:
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": {"podCIDR": "x"}}


def test_the_node_policy_admits_only_the_daemons_own_label_and_reason() -> None:
    """The daemon on worker-1 may set its Node's mode label and reason annotation (added or
    changed); it may not touch another node, another label or annotation (add, change,
    remove), or the spec (a taint); another user is never matched."""
    policy = named(render(None, AUTO), "ValidatingAdmissionPolicy", "-own-node-mode")
    old = node("worker-1", {"zone": "a"}, {"keep": "me"})
    good = copy.deepcopy(old)
    good["metadata"]["labels"][LABEL] = "dra"
    good["metadata"]["annotations"][ANNOTATION] = "dra-ready: ..."
    update = request("UPDATE", "worker-1")
    assert admit(policy, update, good, old) is None
    added = node("worker-1", {"zone": "a", LABEL: "dra"})  # no annotations before or after
    assert admit(policy, update, added, node("worker-1", {"zone": "a"})) is None
    assert admit(policy, request("UPDATE", "worker-1", user="admin"), node("x", {}), old) is None
    other = copy.deepcopy(good)
    other["metadata"]["name"] = "worker-2"
    assert "own Node" in str(admit(policy, update, other, node("worker-2", {"zone": "a"})))
    for labels in (
        {"zone": "b", LABEL: "dra"},
        {"zone": "a", "x": "1", LABEL: "dra"},
        {LABEL: "dra"},
    ):
        bad = copy.deepcopy(good)
        bad["metadata"]["labels"] = labels  # another label changed, added, removed
        assert LABEL in str(admit(policy, update, bad, old))
    bad = copy.deepcopy(good)
    bad["metadata"]["annotations"].pop("keep")
    assert ANNOTATION in str(admit(policy, update, bad, old))
    bad = copy.deepcopy(good)
    bad["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    assert "spec" in str(admit(policy, update, bad, old))
    assert "names no node" in str(admit(policy, request("UPDATE", None), good, old))


def test_auto_objects_pass_kubernetes_validate_and_helm_lint(tmp_path: Path) -> None:
    """Every object the chart renders with mode auto (the Role and RoleBinding in default, the
    Node admission policy among them) passes kubernetes-validate --strict at 1.34 and the
    newest, and `helm lint --strict` is clean."""
    out = kubernetes_validate(render(None, AUTO, "configs.dp.mode=device-plugin"), tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    out = helm_run("lint", "--strict", str(CHART), "--namespace", NAMESPACE, "--set", AUTO)
    assert out.returncode == 0, out.stdout + out.stderr


def test_notes_say_how_to_read_each_nodes_choice(tmp_path: Path) -> None:
    """With mode auto NOTES names the label and the reason annotation to read, and does not
    claim DRA runs where a configuration says mode: dra (none does); with an explicit DRA
    configuration beside it, both."""
    notes = rendered_notes(tmp_path / "a", "--set", AUTO)
    assert "kubectl get nodes -L openfuyao.com/kae.mode" in notes
    assert "mode-reason}" in notes and "DRA mode (driver" not in notes
    both = rendered_notes(tmp_path / "b", "--set", AUTO, "--set", "configs.d.mode=dra")
    assert "mode-reason}" in both and "DRA mode (driver" in both
