"""What the chart says about a bad value: the value's path, the value, and the daemon's own
sentence for what it must be; never a raw pattern. And one name per setting: the daemon's dra
settings written under the chart's dra switches are refused with a pointer to config.dra, and
config.mode is read in any case, as the daemon reads it. Skipped without Helm 3."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from kae_deviceplugin.config.schema import OPTIONS
from scripts.chart_tooling.chart_rules import CHART_VALUES, generated_nodes
from tests.deploy.test_chart_dra import daemonsets, is_dra
from tests.deploy.test_deploy import CHART, NAMESPACE, Obj, helm_run
from tests.deploy.test_value_rules import _rule_and_kind

# A string of each kind that the daemon refuses, and the daemon's sentence for it.
BAD_TEXT = {
    "duration": ("5 parsecs", "must be a number of seconds or a duration such as"),
    "boolean": ("maybe", "must be true or false"),
    "choice": ("nope", "must be one of "),
    "path": ("relative/dir", "must be an absolute path"),
    "optional-path": ("relative/dir", "must be an absolute path"),
    "count": ("many", "must be a whole number from 1 to 64"),
    "engine-list": ("gpu", "must be a list of engine names"),
    "vf-count": ("eight", "must be a whole number from 0 to 63, or max"),
}
PATTERN_SIGNS = ("pattern", "(?i)", "\\s", "^", "$")


def template_values(tmp_path: Path, values: dict[str, object]) -> tuple[int, str, list[Obj]]:
    """`helm template` with ``values`` as a values file: exit code, stderr, objects."""
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    out = helm_run("template", "kae", str(CHART), "-n", NAMESPACE, "--values", str(path))
    objs = [d for d in yaml.safe_load_all(out.stdout) if d] if out.returncode == 0 else []
    return out.returncode, out.stderr, objs


def nested(key: str, value: object) -> dict[str, object]:
    for part in reversed(key.split(".")):
        value = {part: value}
    assert isinstance(value, dict)
    return value


@pytest.mark.parametrize("key", sorted(generated_nodes()))
def test_a_misspelt_value_is_refused_in_the_daemons_words(key: str, tmp_path: Path) -> None:
    """Each value the daemon reads, written as text the daemon refuses: the error names the path
    and the value and says what the daemon requires, with no pattern in sight. The same under a
    per-node configuration, named there."""
    rule, kind, _choices = _rule_and_kind(key)
    text, why = BAD_TEXT[kind]
    with pytest.raises(ValueError):
        rule(text)
    code, stderr, _ = template_values(tmp_path, nested(key, text))
    assert code != 0 and f'{key}: "{text}" {why}' in stderr, stderr
    message = stderr.split(f"{key}: ", 1)[1]
    assert not any(sign in message for sign in PATTERN_SIGNS), message
    if key.startswith("config."):
        inner = key.removeprefix("config.")
        code, stderr, _ = template_values(tmp_path, {"configs": nested(f"x.{inner}", text)})
        assert code != 0 and f'configs.x.{inner}: "{text}" {why}' in stderr, stderr


def test_choices_are_listed_as_the_daemon_lists_them(tmp_path: Path) -> None:
    """A wrong log level lists the levels, as `serve --log-level` would."""
    code, stderr, _ = template_values(tmp_path, {"config": {"log": {"level": "loud"}}})
    assert code != 0
    assert 'config.log.level: "loud" must be one of debug, info, warning, error' in stderr


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"configs": {"Bad_Name": {}}}, "configs.Bad_Name: a configuration's name must be"),
        ({"image": {"digest": "sha1:abc"}}, 'image.digest: "sha1:abc" must be sha256:'),
        ({"psa": {"namespace": "KAE"}}, 'psa.namespace: "KAE" must be a namespace name'),
        ({"devicePlugin": {"fixtureRoot": "/srv/"}}, "without a trailing /"),
        (
            {"metrics": {"prometheusRule": {"for": "five minutes"}}},
            'metrics.prometheusRule.for: "five minutes" must be a Prometheus duration',
        ),
    ],
)
def test_the_charts_own_spellings_are_explained(
    value: dict[str, object], said: str, tmp_path: Path
) -> None:
    """Values only the chart reads are explained too, never shown as a pattern."""
    code, stderr, _ = template_values(tmp_path, value)
    assert code != 0 and said in stderr, stderr
    assert "pattern" not in stderr


DRA_KEYS = sorted(o.key for o in OPTIONS if o.section == "dra")


@pytest.mark.parametrize("key", DRA_KEYS)
def test_a_daemon_dra_setting_under_the_charts_dra_points_to_its_place(
    key: str, tmp_path: Path
) -> None:
    """dra.sharedEngines and dra.unhealthyTaintEffect (the README's old spelling) are the
    daemon's: the refusal names config.dra.<key>; the chart sets dra.nodeName and
    dra.kubeconfig itself and says so."""
    code, stderr, _ = template_values(tmp_path, {"dra": {"enabled": True, key[4:]: "zip"}})
    assert code != 0 and f"{key}: " in stderr, stderr
    chart_key = f"config.{key}"
    if chart_key in CHART_VALUES:
        assert f"set {chart_key}" in stderr and f"configs.<name>.{key}" in stderr
    else:
        assert "set by the chart itself" in stderr


@pytest.mark.parametrize("mode", ["DRA", " Dra ", "dra"])
def test_the_mode_is_read_in_any_case_as_the_daemon_reads_it(mode: str, tmp_path: Path) -> None:
    """`mode: DRA`, which the daemon takes, makes a DRA DaemonSet whose file says `mode: dra`,
    in config and in a configuration."""
    code, stderr, objs = template_values(tmp_path, {"config": {"mode": mode}})
    assert code == 0, stderr
    (daemonset,) = daemonsets(objs).values()
    assert is_dra(daemonset)
    config = yaml.safe_load(
        next(o for o in objs if o["kind"] == "ConfigMap")["data"]["config.yaml"]
    )
    assert config["mode"] == "dra"
    code, stderr, objs = template_values(tmp_path, {"configs": {"x": {"mode": mode}}})
    assert code == 0, stderr
    assert {n: is_dra(d) for n, d in daemonsets(objs).items()} == {
        "kae-kae-device-plugin": False,
        "kae-kae-device-plugin-x": True,
    }


def test_no_schema_node_of_a_daemon_value_holds_a_pattern() -> None:
    """The schema keeps types only for the daemon's values: a pattern there would be quoted raw."""
    schema = (CHART / "values.schema.json").read_text()
    for node in generated_nodes().values():
        assert "pattern" not in node
    assert not re.search(r'"pattern"', schema), "a pattern is left in values.schema.json"
