"""Operating the chart in DRA mode: `kubectl exec <pod> -- kae-deviceplugin doctor` and `list`
see DRA mode from the pod's own environment, `helm upgrade` of a setting the daemon cannot reload
rolls the pods (and of one it reloads does not), a DRA rollout on the host network cannot stall,
and the refusals: a cluster older than 1.34, the DRA role bound to a namespace's default account.
Each is checked on `helm template` output (skipped without Helm 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.deploy.test_chart_dra import DRA, daemonsets
from tests.deploy.test_deploy import CHART, REPO, Obj, container, helm_run, one, render

NODE = "worker-1"


def pod_template(*sets: str) -> Obj:
    """The DaemonSet's pod template for these values (one DaemonSet)."""
    template: Obj = one(render(None, *sets), "DaemonSet")["spec"]["template"]
    return template


def pod_environment(objs: list[Obj], roots: Path) -> dict[str, str]:
    """The container's environment as the kubelet makes it on node ``NODE``, with the host's
    roots moved under ``roots`` (a fixture tree and an empty kubelet root) to run it here."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAE_DP_")}
    env.pop("NODE_NAME", None)
    for item in container(objs)["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        elif item["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName":
            env[item["name"]] = NODE
    env |= {
        "KAE_DP_SYSFS_ROOT": str(roots / "sys"),
        "KAE_DP_DEV_ROOT": str(roots / "dev"),
        "KAE_DP_KUBELET_ROOT": str(roots / "kubelet"),
    }
    if "KAE_DP_CDI_DIR" in env:
        env["KAE_DP_CDI_DIR"] = str(roots / "cdi")
    return env


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO, env=env,
    )  # fmt: skip


def test_doctor_and_list_in_the_dra_pod_look_at_dra_mode(tmp_path: Path) -> None:
    """With nothing but the DRA pod's environment, doctor runs the DRA checks for the pod's node
    (not the device plugin's) and list shows the DRA device column; the device-plugin pod's
    environment keeps both in device-plugin mode."""
    TREES["kunpeng920-2p"].build(tmp_path)
    (tmp_path / "kubelet" / "plugins" / DRIVER).mkdir(parents=True)
    env = pod_environment(render(None, DRA), tmp_path)
    assert (env["KAE_DP_MODE"], env["NODE_NAME"]) == ("dra", NODE)
    report = json.loads(run_cli(env, "doctor", "--output", "json").stdout)
    checks = {row["check"]: row for row in report["checks"]}
    assert {"one mode per node", "dra registration", "dra slices", "dra checkpoint"} <= set(checks)
    assert "kubelet" not in checks
    assert str(tmp_path / "kubelet" / "plugins_registry") in checks["dra registration"]["detail"]
    listed = run_cli(env, "list")
    assert listed.returncode == 0 and "DRA DEVICE" in listed.stdout, listed.stderr
    plain_env = pod_environment(render(None), tmp_path)
    assert "KAE_DP_MODE" not in plain_env
    report = json.loads(run_cli(plain_env, "doctor", "--output", "json").stdout)
    assert "kubelet" in {row["check"] for row in report["checks"]}
    assert "DRA DEVICE" not in run_cli(plain_env, "list").stdout


def test_the_dra_pod_env_repeats_the_config_files_values() -> None:
    """The environment beats the config file for serve, so each KAE_DP_* value the chart sets is
    the file's own (here with a moved CDI directory and metrics port)."""
    objs = render(None, DRA, "cdi.specDir=/etc/cdi", "metrics.port=9500")
    env = {e["name"]: e.get("value") for e in container(objs)["env"]}
    assert env["KAE_DP_CDI_DIR"] == "/etc/cdi"
    assert env["KAE_DP_METRICS_ADDRESS"] == ":9500"
    assert env["KAE_DP_NFD_FEATURES_FILE"].endswith("/features.d/kae")


RESTART = [
    "config.dra.sharedEngines=zip",
    "config.dra.unhealthyTaintEffect=NoExecute",
    "config.registration=kubelet-socket",
    "config.stateDir=/srv/kae",
]
RELOADED = [
    "config.scanInterval=5s",
    "config.log.level=debug",
    "config.allocationPolicy=packed",
    "config.engines.zip.shares=4",
    "config.env.uadkNumaHint=true",
]


@pytest.mark.parametrize("change", RESTART)
def test_a_setting_the_daemon_cannot_reload_rolls_the_pods(change: str) -> None:
    """`helm upgrade` of a restart-only setting changes the pod template (its checksum), so the
    DaemonSet rolls; the daemon would otherwise keep the old value and only log it."""
    before = pod_template(DRA)
    after = pod_template(DRA, change)
    key = "checksum/restart-settings"
    assert before["metadata"]["annotations"][key] != after["metadata"]["annotations"][key]


@pytest.mark.parametrize("change", RELOADED)
def test_a_setting_the_daemon_reloads_changes_no_pod(change: str) -> None:
    """A setting the daemon reloads from the ConfigMap leaves the pod template as it was."""
    assert pod_template(DRA, change) == pod_template(DRA)


def test_a_configurations_dra_setting_rolls_only_its_own_daemonset() -> None:
    """configs.<name>.dra.sharedEngines changes that configuration's pod template only."""
    base = ("configs.x.mode=dra", DRA)
    before = daemonsets(render(None, *base))
    after = daemonsets(render(None, *base, "configs.x.dra.sharedEngines=zip"))
    name = "kae-kae-device-plugin"
    assert before[name]["spec"]["template"] == after[name]["spec"]["template"]
    assert before[f"{name}-x"]["spec"]["template"] != after[f"{name}-x"]["spec"]["template"]


def test_a_dra_rollout_on_the_host_network_cannot_stall() -> None:
    """hostNetwork: the new pod could not bind the metrics port beside the old one, so the old
    one leaves first (maxSurge 0, maxUnavailable 1); without it the new pod surges."""
    strategy = one(render(None, DRA, "hostNetwork=true"), "DaemonSet")["spec"]["updateStrategy"]
    assert strategy["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    strategy = one(render(None, DRA), "DaemonSet")["spec"]["updateStrategy"]
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def template(*args: str) -> subprocess.CompletedProcess[str]:
    return helm_run("template", "kae", str(CHART), *args)


@pytest.mark.parametrize("version", ["1.30.4", "1.33.9"])
def test_dra_below_kubernetes_1_34_is_refused_naming_the_version(version: str) -> None:
    """resource.k8s.io/v1 is served from 1.34: older clusters get a refusal naming theirs; the
    device plugin still installs there."""
    out = template("--set", DRA, "--kube-version", version)
    assert out.returncode != 0 and f"this cluster is v{version}" in out.stderr, out.stderr
    assert "1.34" in out.stderr
    assert template("--kube-version", version).returncode == 0
    mode = template("--set", "configs.x.mode=dra", "--kube-version", version)
    assert mode.returncode != 0 and "1.34" in mode.stderr


@pytest.mark.parametrize("version", ["1.34.0", "1.35.2-eks-1a2b3c", "1.37.0"])
def test_dra_installs_from_kubernetes_1_34(version: str) -> None:
    """1.34 and newer, provider suffixes included, render DRA mode."""
    out = template("--set", DRA, "--kube-version", version)
    assert out.returncode == 0, out.stderr


def test_the_dra_role_is_never_bound_to_the_namespaces_default_account() -> None:
    """serviceAccount.create=false without a name is refused in DRA mode (the role would go to
    `default`); with a name it binds that one; device-plugin mode binds nothing, so it renders."""
    out = template("--set", DRA, "--set", "serviceAccount.create=false")
    assert out.returncode != 0 and "serviceAccount.name" in out.stderr, out.stderr
    assert "default account" in out.stderr
    objs = render(None, DRA, "serviceAccount.create=false", "serviceAccount.name=kae-driver")
    (subject,) = one(objs, "ClusterRoleBinding")["subjects"]
    assert subject["name"] == "kae-driver"
    assert template("--set", "serviceAccount.create=false").returncode == 0
