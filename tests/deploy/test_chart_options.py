"""The chart speaks the seed's options, installs the NodeFeatureRule only where NFD is, and
guards the metrics port: each checked on `helm template` output (skipped without Helm 3)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_deploy import CHART, NAMESPACE, container, helm_run, of_kind, one, render

NFD_API = "nfd.k8s-sigs.io/v1alpha1"


def template(*args: str) -> subprocess.CompletedProcess[str]:
    return helm_run("template", "kae", str(CHART), "--namespace", NAMESPACE, *args)


def objects(*args: str) -> list[dict[str, Any]]:
    out = template(*args)
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@pytest.mark.parametrize(
    ("setting", "advice"),
    [
        ("nfd.enabled=true", "Install NFD with its own chart"),
        ("driver.enabled=true", "belong to the node image"),
        ("driver.enabledCleanup=true", "keep driver.enabledCleanup=false"),
        ("driver.repository=registry.example.com/kae-driver", "image.repository"),
        ("driver.version=2.0.2", "image.digest"),
    ],
)
def test_seed_options_this_chart_cannot_honour_fail_with_what_to_do(
    setting: str, advice: str
) -> None:
    """A seed user's driver or NFD option is not ignored: the install stops, saying what to do."""
    out = template("--set", setting)
    assert out.returncode != 0
    assert setting.split("=", maxsplit=1)[0] in out.stderr and advice in out.stderr, out.stderr


def test_seed_values_that_describe_this_chart_are_accepted() -> None:
    """nfd.enabled, driver.enabled and driver.enabledCleanup set false render as the default."""
    sets = ["nfd.enabled=false", "driver.enabled=false", "driver.enabledCleanup=false"]
    args = [arg for s in sets for arg in ("--set", s)]
    assert [o["kind"] for o in objects(*args)] == [o["kind"] for o in render()]


def test_seed_table_in_the_readme_names_every_seed_option() -> None:
    """The chart README's seed table answers each of the seed's options."""
    readme = (CHART / "README.md").read_text()
    table = readme.split("## Coming from the seed chart", 1)[1].split("\n## ", 1)[0]
    for key in (
        "devicePlugin.enabled",
        "operator.enabledHPRE",
        "psa.enabled",
        "nfd.nodefeaturerules",
        "nfd.enabled",
        "driver.enabled",
        "driver.enabledCleanup",
        "driver.repository",
        "driver.version",
        "image.repository",
        "image.tag",
        "image.digest",
    ):
        assert f"`{key}`" in table, key


def test_node_feature_rule_follows_the_api_unless_forced() -> None:
    """auto: the rule only where the API serves NFD's group; true and false force it."""
    assert not of_kind(objects(), "NodeFeatureRule")
    assert of_kind(objects("--api-versions", NFD_API), "NodeFeatureRule")
    assert of_kind(objects("--set", "nfd.nodefeaturerules=true"), "NodeFeatureRule")
    forced_off = objects("--api-versions", NFD_API, "--set", "nfd.nodefeaturerules=false")
    assert not of_kind(forced_off, "NodeFeatureRule")
    assert template("--set", "nfd.nodefeaturerules=maybe").returncode != 0  # the schema


def test_service_monitor_honours_the_exported_pod_labels() -> None:
    """honorLabels keeps kae_device_allocated's namespace/pod/container from being overwritten."""
    monitor = one(objects("--set", "metrics.serviceMonitor.enabled=true"), "ServiceMonitor")
    assert all(endpoint["honorLabels"] is True for endpoint in monitor["spec"]["endpoints"])


def test_bind_pod_ip_puts_the_downward_api_address_into_the_daemon_env() -> None:
    """bindPodIP: POD_IP from status.podIP, then KAE_DP_METRICS_ADDRESS=$(POD_IP):<port>."""
    env = container(objects("--set", "metrics.bindPodIP=true,metrics.port=9500"))["env"]
    names = [e["name"] for e in env]
    pod_ip = env[names.index("POD_IP")]
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    address = env[names.index("KAE_DP_METRICS_ADDRESS")]
    assert address["value"] == "$(POD_IP):9500"
    assert names.index("POD_IP") < names.index("KAE_DP_METRICS_ADDRESS")  # $(VAR) needs order
    without = {e["name"]: e.get("value") for e in container(objects())["env"]}
    assert "POD_IP" not in without
    assert without["KAE_DP_METRICS_ADDRESS"] == ":9410"  # the file's address, for doctor


def test_network_policy_admits_only_the_selected_scrapers_to_the_metrics_port() -> None:
    """The policy selects the plugin pods, allows the metrics port from the given selectors."""
    sets = "metrics.networkPolicy.enabled=true,metrics.networkPolicy.namespaceSelector.team=obs"
    rendered = objects("--set", sets + ",metrics.networkPolicy.podSelector.app=prometheus")
    policy = one(rendered, "NetworkPolicy")
    pod_labels = one(rendered, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"team": "obs"}},
            "podSelector": {"matchLabels": {"app": "prometheus"}},
        }
    ]
    assert not of_kind(objects(), "NetworkPolicy")
    unselective = template("--set", "metrics.networkPolicy.enabled=true")
    assert unselective.returncode != 0 and "namespaceSelector" in unselective.stderr


def prometheus_rule_groups() -> list[dict[str, Any]]:
    rule = one(objects("--set", "metrics.prometheusRule.enabled=true"), "PrometheusRule")
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not installed (Debian package prometheus); the rules were not checked",
)
def test_prometheus_rule_passes_promtool(tmp_path: Path) -> None:
    """`promtool check rules` accepts the chart's alerts, which cover the five conditions."""
    groups = prometheus_rule_groups()
    alerts = {r["alert"]: r for g in groups for r in g["rules"]}
    assert set(alerts) == {
        "KaeDeviceUnhealthy",
        "KaeResourceNotRegistered",
        "KaeAllocationErrors",
        "KaeDeviceGrantUnused",
        "KaeDeviceQueuesOverGrant",
    }
    assert "kae_device_healthy" in alerts["KaeDeviceUnhealthy"]["expr"]
    assert "kae_resource_registered" in alerts["KaeResourceNotRegistered"]["expr"]
    assert "kae_allocation_errors_total" in alerts["KaeAllocationErrors"]["expr"]
    assert "kae_device_holders" in alerts["KaeDeviceGrantUnused"]["expr"]
    assert alerts["KaeDeviceGrantUnused"]["for"] == "10m"
    assert "kae_device_queues_claimed" in alerts["KaeDeviceQueuesOverGrant"]["expr"]
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    out = subprocess.run(
        ["promtool", "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "5 rules found" in out.stdout


def rendered_notes(tmp_path: Path, *args: str) -> str:
    """NOTES.txt as `helm install` prints it: `helm template` leaves NOTES out, so a copy of the
    chart renders the same text through `tpl` into a manifest."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "NOTES.check")
    (chart / "templates" / "zz-notes.yaml").write_text(
        'notes: {{ tpl (.Files.Get "NOTES.check") . | toJson }}\n'
    )
    out = helm_run(
        "template", "kae", str(chart), "--namespace", NAMESPACE,
        "--show-only", "templates/zz-notes.yaml", *args,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    notes: str = yaml.safe_load(out.stdout)["notes"]
    return notes


def test_notes_warn_when_no_rule_labels_the_nodes_the_daemonset_selects(tmp_path: Path) -> None:
    """Without the NodeFeatureRule and with requireLabel, NOTES says no node will match and how
    to fix it; with the rule, or without the label requirement, it does not."""
    warned = rendered_notes(tmp_path / "a")
    assert "WARNING: no NodeFeatureRule was installed" in warned
    assert "no node will run the plugin" in warned and "nfd.requireLabel=false" in warned
    assert "WARNING" not in rendered_notes(tmp_path / "b", "--api-versions", NFD_API)
    assert "WARNING" not in rendered_notes(tmp_path / "c", "--set", "nfd.requireLabel=false")
    forced_off = rendered_notes(tmp_path / "d", "--set", "nfd.nodefeaturerules=false")
    assert "nfd.nodefeaturerules=false)" in forced_off
