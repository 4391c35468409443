"""Per-node configurations: `configs: {<name>: <part of config>}`, one DaemonSet and ConfigMap per
configuration, chosen by the node label openfuyao.com/kae.config, no node served twice; each
checked on `helm template` output (skipped without Helm 3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kae_deviceplugin.config.file import parse_config_text
from kae_deviceplugin.config.resolve import resolve_settings
from kae_deviceplugin.config.settings import Settings
from tests.deploy.test_deploy import CHART, NAMESPACE, Obj, helm_run, of_kind

CONFIG_LABEL = "openfuyao.com/kae.config"
CONFIGS = {
    "vf-only": {"engines": {"sec": {"functions": "vf"}, "zip": {"functions": "vf"}}},
    "shared": {"engines": {"hpre": {"shares": 4}}, "scanInterval": "5s"},
}


def rendered(tmp_path: Path, configs: dict[str, Any]) -> list[Obj]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    values = tmp_path / "values.json"
    values.write_text(json.dumps({"configs": configs, "nfd": {"requireLabel": False}}))
    out = helm_run("template", "kae", str(CHART), "-n", NAMESPACE, "--values", str(values))
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def _matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    """A node-selector requirement against a node's labels, as the scheduler reads one."""
    key, operator = expression["key"], expression["operator"]
    values = expression.get("values", [])
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {operator} not expected here")


def serves(daemonset: Obj, labels: dict[str, str]) -> bool:
    """Whether the DaemonSet's required node affinity and node selector admit this node."""
    spec = daemonset["spec"]["template"]["spec"]
    if any(labels.get(k) != v for k, v in spec.get("nodeSelector", {}).items()):
        return False
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return any(
        all(_matches(e, labels) for e in term["matchExpressions"])
        for term in terms["nodeSelectorTerms"]
    )


def test_each_configuration_gets_its_daemonset_and_configmap(tmp_path: Path) -> None:
    """Two configurations: three DaemonSets, each mounting its own ConfigMap, whose config file
    is the default with that configuration's overrides merged in, and which the daemon takes."""
    objs = rendered(tmp_path, CONFIGS)
    daemonsets = {d["metadata"]["name"]: d for d in of_kind(objs, "DaemonSet")}
    maps = {m["metadata"]["name"]: m for m in of_kind(objs, "ConfigMap")}
    base = "kae-kae-device-plugin"
    assert set(daemonsets) == set(maps) == {base, f"{base}-shared", f"{base}-vf-only"}
    for name, daemonset in daemonsets.items():
        (volume,) = [
            v for v in daemonset["spec"]["template"]["spec"]["volumes"] if "configMap" in v
        ]
        assert volume["configMap"]["name"] == name
    settings = {name: daemon_settings(m["data"]["config.yaml"]) for name, m in maps.items()}
    assert settings[base].engine("sec").functions == "all"
    assert settings[f"{base}-vf-only"].engine("sec").functions == "vf"
    assert settings[f"{base}-vf-only"].engine("zip").functions == "vf"
    assert settings[f"{base}-vf-only"].engine("hpre").functions == "all"
    assert settings[f"{base}-shared"].engine("hpre").shares == 4
    assert settings[f"{base}-shared"].scan_interval == 5.0
    assert settings[base].scan_interval == 1.0


def daemon_settings(text: str) -> Settings:
    """The daemon's settings from a config file's text, read as the daemon reads it."""
    return resolve_settings(parse_config_text(text, "config.yaml"), {})


@pytest.mark.parametrize(
    ("labels", "served_by"),
    [
        ({}, ""),
        ({CONFIG_LABEL: "vf-only"}, "-vf-only"),
        ({CONFIG_LABEL: "shared"}, "-shared"),
        ({CONFIG_LABEL: "typo"}, ""),  # a name with no configuration: the default serves it
        ({"openfuyao.com/kae.deploy.device-plugin": "false", CONFIG_LABEL: "shared"}, None),
    ],
)
def test_every_node_is_served_by_at_most_one_daemonset(
    labels: dict[str, str], served_by: str | None, tmp_path: Path
) -> None:
    """The label picks exactly one DaemonSet; an opted-out node none; never two."""
    node = {"kubernetes.io/os": "linux", **labels}
    objs = rendered(tmp_path, CONFIGS)
    serving = [d["metadata"]["name"] for d in of_kind(objs, "DaemonSet") if serves(d, node)]
    expected = [] if served_by is None else [f"kae-kae-device-plugin{served_by}"]
    assert serving == expected


def test_daemonsets_select_their_own_pods_and_the_default_is_unchanged(tmp_path: Path) -> None:
    """A named DaemonSet's selector and pods carry its name; the default DaemonSet's selector is
    the one it had without configs (a selector cannot change on upgrade)."""
    without = of_kind(rendered(tmp_path / "a", {}), "DaemonSet")
    objs = rendered(tmp_path / "b", CONFIGS)
    by_name = {d["metadata"]["name"]: d for d in of_kind(objs, "DaemonSet")}
    default = by_name.pop("kae-kae-device-plugin")
    assert default["spec"]["selector"] == without[0]["spec"]["selector"]
    for name, daemonset in by_name.items():
        selector = daemonset["spec"]["selector"]["matchLabels"]
        assert selector[CONFIG_LABEL] == name.removeprefix("kae-kae-device-plugin-")
        assert selector.items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize(
    ("configs", "said"),
    [
        ({"vf-only": {"scanInterval": "2h"}}, "configs.vf-only.scanInterval"),
        (
            {"vf-only": {"engines": {"sec": {"functions": "some"}}}},
            'configs.vf-only.engines.sec.functions: "some" must be one of all, pf, vf, prefer-vf',
        ),
        ({"vf-only": {"unknownKey": 1}}, "/configs/vf-only"),
        ({"Bad_Name": {}}, "Bad_Name"),
    ],
)
def test_a_configuration_the_daemon_would_refuse_fails_the_render(
    configs: dict[str, Any], said: str, tmp_path: Path
) -> None:
    """A configuration is judged by the same rules as `config`, and its name must be a label."""
    values = tmp_path / "values.json"
    values.write_text(json.dumps({"configs": configs}))
    out = helm_run("template", "kae", str(CHART), "-n", NAMESPACE, "--values", str(values))
    assert out.returncode != 0 and said in out.stderr, out.stderr
