"""The chart's DRA mode (dra.enabled, or a configuration's mode: dra): exactly what the driver
needs in the DaemonSet, the cluster-level objects only while some DaemonSet runs in DRA mode, and
none of it in device-plugin mode; each checked on `helm template` output (skipped without Helm 3).
The admission policy's CEL is exercised in test_chart_dra_policy.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.test_deploy import (
    CHART,
    FULL_VALUES,
    NAMESPACE,
    REPO,
    Obj,
    container,
    daemon_config,
    helm_run,
    host_mounts,
    of_kind,
    one,
    pod_spec,
    render,
)

DRA_VALUES = CHART / "ci" / "dra-values.yaml"
DRA = "dra.enabled=true"
DRA_KINDS = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "DeviceClass",
}
ENGINES = ("hpre", "sec", "zip")


def env_of(objs: list[Obj]) -> dict[str, Obj]:
    return {e["name"]: e for e in container(objs)["env"]}


def daemonsets(objs: list[Obj]) -> dict[str, Obj]:
    return {d["metadata"]["name"]: d for d in of_kind(objs, "DaemonSet")}


def is_dra(daemonset: Obj) -> bool:
    """Whether a DaemonSet's pods run the DRA driver, read from its pod spec."""
    spec = daemonset["spec"]["template"]["spec"]
    names = {e["name"] for e in spec["containers"][0]["env"]}
    return bool(spec["automountServiceAccountToken"]) and {"NODE_NAME", "POD_UID"} <= names


@pytest.mark.parametrize("values", [None, FULL_VALUES], ids=["default", "full"])
def test_device_plugin_mode_has_no_rbac_policy_token_or_device_class(values: Path | None) -> None:
    """The default mode renders none of DRA's objects, mounts no token and sets no DRA env."""
    objs = render(values)
    assert not DRA_KINDS & {o["kind"] for o in objs}
    assert pod_spec(objs)["automountServiceAccountToken"] is False
    assert not {"NODE_NAME", "POD_UID"} & set(env_of(objs))
    assert "mode" not in daemon_config(objs)


def test_dra_mode_renders_every_dra_object() -> None:
    """dra.enabled: the ClusterRole and binding, the two policies (slices, claim status) and
    their bindings, three classes."""
    kinds = [o["kind"] for o in render(None, DRA)]
    for kind in DRA_KINDS - {"DeviceClass"}:
        assert kinds.count(kind) == (2 if "AdmissionPolicy" in kind else 1), kind
    assert kinds.count("DeviceClass") == 3


def test_cluster_role_grants_exactly_what_the_driver_uses() -> None:
    """ResourceSlices read and written, claims read and their status patched (server-side
    apply), nodes read: nothing else."""
    role = one(render(None, DRA), "ClusterRole")
    rules = {
        (group, resource): sorted(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rules == {
        ("resource.k8s.io", "resourceslices"): sorted(
            ["get", "list", "watch", "create", "update", "patch", "delete"]
        ),
        ("resource.k8s.io", "resourceclaims"): ["get"],
        ("resource.k8s.io", "resourceclaims/status"): ["patch"],
        ("", "nodes"): ["get"],
    }


@pytest.mark.parametrize(
    ("sets", "namespace"),
    [((DRA,), NAMESPACE), ((DRA, "psa.enabled=true", "serviceAccount.name=kae-sa"), "default")],
    ids=["release-namespace", "psa"],
)
def test_binding_and_policy_name_the_pods_account(sets: tuple[str, ...], namespace: str) -> None:
    """The binding's subject and the policy's user are the account the pods run as, in the
    namespace the pods are in (psa.namespace with psa.enabled); DRA's objects are cluster-scoped."""
    objs = render(None, *sets, namespace=namespace)
    ds = one(objs, "DaemonSet")
    account, ns = pod_spec(objs)["serviceAccountName"], ds["metadata"]["namespace"]
    assert ns == "kae-system"
    (subject,) = one(objs, "ClusterRoleBinding")["subjects"]
    assert subject == {"kind": "ServiceAccount", "name": account, "namespace": ns}
    binding = one(objs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == one(objs, "ClusterRole")["metadata"]["name"]
    policies = of_kind(objs, "ValidatingAdmissionPolicy")
    assert {p["metadata"]["name"].rsplit("-own-node-", 1)[1] for p in policies} == {
        "slices",
        "claims",
    }
    bindings = {
        b["spec"]["policyName"]: b for b in of_kind(objs, "ValidatingAdmissionPolicyBinding")
    }
    for policy in policies:
        (condition,) = policy["spec"]["matchConditions"]
        assert f'"system:serviceaccount:{ns}:{account}"' in condition["expression"]
        assert bindings[policy["metadata"]["name"]]["spec"] == {
            "policyName": policy["metadata"]["name"],
            "validationActions": ["Deny"],
        }
    for obj in objs:
        if obj["kind"] in DRA_KINDS:
            assert "namespace" not in obj["metadata"], obj["kind"]


def test_token_is_mounted_in_dra_pods_only() -> None:
    """The DRA pod mounts a token; the ServiceAccount keeps automount off for anything else."""
    objs = render(None, DRA)
    assert pod_spec(objs)["automountServiceAccountToken"] is True
    assert one(objs, "ServiceAccount")["automountServiceAccountToken"] is False


def test_dra_pod_mounts_exactly_what_the_driver_uses() -> None:
    """The driver's own plugins/ directory, plugins_registry, the CDI directory, /dev, state,
    NFD, and read-only pod-resources (devices device-plugin pods hold) and the runtimes' config
    directories; no device-plugins."""
    assert host_mounts(render(None, DRA)) == {
        "/var/lib/kubelet/pod-resources": ("/var/lib/kubelet/pod-resources", True),
        "/etc/containerd": ("/etc/containerd", True),
        "/etc/isulad": ("/etc/isulad", True),
        "/var/lib/kubelet/plugins/kae.openfuyao.com": (
            "/var/lib/kubelet/plugins/kae.openfuyao.com",
            False,
        ),
        "/var/lib/kubelet/plugins_registry": ("/var/lib/kubelet/plugins_registry", False),
        "/var/run/cdi": ("/var/run/cdi", False),
        "/dev": ("/host/dev", True),
        "/var/lib/kae-deviceplugin": ("/var/lib/kae-deviceplugin", False),
        "/etc/kubernetes/node-feature-discovery/features.d": (
            "/etc/kubernetes/node-feature-discovery/features.d",
            False,
        ),
    }


def test_dra_mounts_follow_kubelet_root_and_cdi_dir_and_ignore_registration() -> None:
    """A moved kubelet root and CDI directory move the mounts and the config's paths;
    kubelet-socket registration (a device-plugin setting) does not drop plugins_registry."""
    objs = render(
        None,
        DRA,
        "kubeletRootDir=/var/lib/k0s/kubelet/",
        "cdi.specDir=/etc/cdi",
        "config.registration=kubelet-socket",
        "nfd.localFeatures.enabled=false",
    )
    root = "/var/lib/k0s/kubelet"
    assert set(host_mounts(objs)) == {
        f"{root}/plugins/kae.openfuyao.com",
        f"{root}/plugins_registry",
        f"{root}/pod-resources",
        "/etc/cdi",
        "/dev",
        "/var/lib/kae-deviceplugin",
        "/etc/containerd",
        "/etc/isulad",
    }
    paths = daemon_config(objs)["paths"]
    assert (paths["kubeletRoot"], paths["cdiDir"]) == (root, "/etc/cdi")
    assert env_of(objs)["KAE_DP_KUBELET_ROOT"]["value"] == root


def test_node_name_and_pod_uid_come_from_the_downward_api() -> None:
    """NODE_NAME is the pod's node (the slices' node), POD_UID its UID (its socket names)."""
    env = env_of(render(None, DRA))
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_UID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}


def test_rolling_update_surges_in_dra_mode_only() -> None:
    """DRA: the new pod starts beside the old one; device-plugin mode and OnDelete are kept."""
    strategy = one(render(None, DRA), "DaemonSet")["spec"]["updateStrategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    strategy = one(render(None), "DaemonSet")["spec"]["updateStrategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    strategy = one(render(None, DRA, "updateStrategy.type=OnDelete"), "DaemonSet")["spec"]
    assert strategy["updateStrategy"] == {"type": "OnDelete"}


def test_dra_config_file_is_accepted_by_the_daemon(tmp_path: Path) -> None:
    """mode: dra, the CDI directory, no node-wide device-plugin CDI spec; check-config takes it."""
    objs = render(None, DRA, "cdi.enabled=true")
    config = daemon_config(objs)
    assert (config["mode"], config["cdi"], config["paths"]["cdiDir"]) == (
        "dra",
        False,
        "/var/run/cdi",
    )
    assert "dra" not in config  # nothing to pass through: the node name comes from NODE_NAME
    path = tmp_path / "config.yaml"
    path.write_text(one(objs, "ConfigMap")["data"]["config.yaml"])
    out = subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", "check-config", str(path)],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_config_dra_reaches_the_file_and_refuses_what_the_daemon_does_not_read(
    tmp_path: Path,
) -> None:
    """config.dra reaches the file's dra section as written (in DRA mode); nodeName and
    kubeconfig (the chart sets the node and the account) and keys the daemon does not know are
    refused by the schema."""
    section = {"unhealthyTaintEffect": "NoExecute", "sharedEngines": "zip"}
    values = tmp_path / "values.json"
    values.write_text(json.dumps({"dra": {"enabled": True}, "config": {"dra": section}}))
    out = helm_run("template", "kae", str(CHART), "-n", NAMESPACE, "--values", str(values))
    assert out.returncode == 0, out.stderr
    objs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert daemon_config(objs)["dra"] == section
    for key in ("nodeName", "kubeconfig", "someKey"):
        out = helm_run("template", "kae", str(CHART), "--set", f"config.dra.{key}=x")
        assert out.returncode != 0 and "schema" in out.stderr, out.stderr


def test_device_classes_match_the_plain_manifest_and_name_the_extended_resources() -> None:
    """Each class selects its engine of our driver, maps openfuyao.com/kae.<engine>, and is
    the object deploy/dra/deviceclasses.yaml holds."""
    classes = {c["metadata"]["name"]: c for c in of_kind(render(None, DRA), "DeviceClass")}
    assert set(classes) == {f"{e}.kae.openfuyao.com" for e in ENGINES}
    plain = yaml.safe_load_all((REPO / "deploy" / "dra" / "deviceclasses.yaml").read_text())
    plain_specs = {d["metadata"]["name"]: d["spec"] for d in plain if d}
    for engine in ENGINES:
        spec = classes[f"{engine}.kae.openfuyao.com"]["spec"]
        assert spec["extendedResourceName"] == f"openfuyao.com/kae.{engine}"
        (selector,) = spec["selectors"]
        assert f'.engine == "{engine}"' in selector["cel"]["expression"]
        assert plain_specs[f"{engine}.kae.openfuyao.com"] == spec


def test_dra_switches_drop_their_objects() -> None:
    """nodeScopedPolicy, deviceClasses.create and extendedResources each turn off their part."""
    kinds = {o["kind"] for o in render(None, DRA, "dra.nodeScopedPolicy=false")}
    assert "ClusterRole" in kinds and "ValidatingAdmissionPolicy" not in kinds
    assert "ValidatingAdmissionPolicyBinding" not in kinds
    assert not of_kind(render(None, DRA, "dra.deviceClasses.create=false"), "DeviceClass")
    for c in of_kind(render(None, DRA, "dra.extendedResources=false"), "DeviceClass"):
        assert "extendedResourceName" not in c["spec"]
    assert not DRA_KINDS & {o["kind"] for o in render(None, DRA, "devicePlugin.enabled=false")}


def test_a_chosen_runtime_config_mounts_its_directory_alone() -> None:
    """config.dra.runtimeConfig set: only its directory is mounted (read-only, at the same
    path the daemon reads), and the daemon's file names the file."""
    objs = render(None, DRA, "config.dra.runtimeConfig=/etc/isulad/daemon.json")
    mounts = host_mounts(objs)
    assert mounts["/etc/isulad"] == ("/etc/isulad", True) and "/etc/containerd" not in mounts
    assert "runtimeConfig: /etc/isulad/daemon.json" in json.dumps(objs)
