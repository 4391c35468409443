"""The chart refuses what the daemon refuses and accepts what it accepts, for every value the chart
hands to the daemon as written; its rules are generated from the daemon's, and current.

Each sample is first put to the daemon's own rule (so a sample that the daemon would take cannot
pose as a refusal), then to `helm template` with the sample in a values file (YAML keeps its type:
5, "5" and 0.5 are three different samples).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kae_deviceplugin.config.file import ENGINE_FILE_RULES, file_rule
from kae_deviceplugin.config.rules import Rule, optional
from kae_deviceplugin.config.schema import OPTIONS_BY_FIELD, Kind
from kae_deviceplugin.core.views import FUNCTIONS
from scripts.chart_tooling.chart_rules import (
    CHART_ONLY,
    CHART_VALUES,
    OPTIONAL_VALUES,
    generated_nodes,
)
from tests.deploy.test_deploy import CHART, NAMESPACE, REPO, daemon_config, helm_run

REFUSED: dict[Kind, list[object]] = {
    "duration": ["0s", "2h", 0, -1, "-1s", "59m61s", "1h1ns", "3601", "abc", "5 s", True],
    "boolean": ["maybe", "", 1, None, "yes", "true"],  # the file takes YAML booleans only
    "choice": ["nope", "", 5, None],
    "path": ["relative/dir", "./x", "", 5],
    "optional-path": ["relative/dir", "~/x", 5],
    "count": [0, 65, "0", "65", "-1", "x", True, 1.5, "4"],
    "engine-list": ["gpu", "zip,gpu", "zipsec", 5, True, ["zip", 5]],
    "vf-count": [-1, 64, "8", "x", True, 1.5, "maxx", ""],
}
ACCEPTED: dict[Kind, list[object]] = {
    "duration": [5, "5", 0.5, "500ms", "1m30s", "1h", 3600, "+1s", " 2s "],
    "boolean": [True, False],
    "choice": ["<first>", "<last in capitals>", "<first with blanks>"],
    "path": ["/srv/kae", "/srv/kae/dir/"],
    "optional-path": [None, "", "/usr/local/lib/engines-1.1"],
    "count": [1, 64, 8],
    "engine-list": ["zip", "ZIP, sec", ["zip", "hpre sec"], ""],
    "vf-count": [8, 0, "max", 63, " MAX "],  # null (unset) writes no key: test_configs
}


def _rule_and_kind(key: str) -> tuple[Rule, Kind, tuple[str, ...]]:
    if key in CHART_VALUES:
        option = OPTIONS_BY_FIELD[CHART_VALUES[key]]
        rule = file_rule(option)  # the chart writes the value into the config file as written
        rule = optional(rule) if key in OPTIONAL_VALUES else rule  # "": not set
        return rule, option.kind, option.choices
    field = key.rpartition(".")[2]  # config.engines.<engine>.<field>
    rule = ENGINE_FILE_RULES[field]
    if field == "shares":
        return rule, "count", ()
    if field == "vfs":
        return rule, "vf-count", ()
    return rule, "choice", FUNCTIONS


def _sample(value: object, choices: tuple[str, ...]) -> object:
    """A choice sample made concrete from the key's own choices."""
    if not choices or not isinstance(value, str):
        return value
    made = {
        "<first>": choices[0],
        "<last in capitals>": choices[-1].upper(),
        "<first with blanks>": f"  {choices[0]} ",
    }
    return made.get(value, value)


def _values(settings: dict[str, object]) -> dict[str, Any]:
    """Nested chart values from dotted keys."""
    values: dict[str, Any] = {}
    for key, value in settings.items():
        *parents, name = key.split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {})
        node[name] = value
    return values


def template(tmp_path: Path, settings: dict[str, object]) -> subprocess.CompletedProcess[str]:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(_values(settings)), encoding="utf-8")
    return helm_run("template", "kae", str(CHART), "-n", NAMESPACE, "--values", str(values))


def _refuses(rule: Rule, value: object) -> bool:
    try:
        rule(value)
    except ValueError:
        return True
    return False


def _refusals() -> list[tuple[str, object]]:
    """Each generated value with each sample of its kind that its rule refuses (an optional
    value takes "" and null)."""
    cases = []
    for key in generated_nodes():
        rule, kind, choices = _rule_and_kind(key)
        cases += [(key, s) for s in REFUSED[kind] if _refuses(rule, _sample(s, choices))]
    return cases


def test_the_checked_in_chart_rules_are_current() -> None:
    """values.schema.json and _value_rules.tpl hold what scripts/render-chart-schema.py writes."""
    done = subprocess.run(
        [sys.executable, "scripts/render-chart-schema.py", "--check"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("key", "sample"), _refusals(), ids=repr)
def test_a_value_the_daemon_refuses_is_refused_by_helm(
    key: str, sample: object, tmp_path: Path
) -> None:
    """The daemon's rule refuses the sample, and so does `helm template`, naming the value."""
    rule, _kind, choices = _rule_and_kind(key)
    with pytest.raises(ValueError):
        rule(_sample(sample, choices))
    out = template(tmp_path, {key: _sample(sample, choices)})
    assert out.returncode != 0, f"helm rendered {key}={sample!r}"
    named = ("/" + key.replace(".", "/"), f"{key}:", f"missing property '{key.rpartition('.')[2]}'")
    assert any(name in out.stderr for name in named), out.stderr  # null in values deletes a key


def _file_value(config: dict[str, Any], key: str) -> object:
    """Where the chart writes ``key`` in the daemon's config file, read from it."""
    if key.startswith("config.engines."):
        path = key.removeprefix("config.")
    else:
        path = OPTIONS_BY_FIELD[CHART_VALUES[key]].key
    node: Any = config
    for part in path.split("."):
        node = node[part]
    return node


@pytest.mark.parametrize("index", range(max(len(s) for s in ACCEPTED.values())))
def test_a_value_the_daemon_accepts_reaches_its_config_file_as_the_same_value(
    index: int, tmp_path: Path
) -> None:
    """Every generated value at once, each set to one accepted sample of its kind, renders; the
    config file then holds what the daemon reads as the same setting."""
    chosen: dict[str, object] = {}
    for key in sorted(generated_nodes().keys() - {"config.mode"}):  # see test_value_messages
        rule, kind, choices = _rule_and_kind(key)
        samples = ACCEPTED[kind]
        chosen[key] = _sample(samples[index % len(samples)], choices)
        rule(chosen[key])  # the daemon takes it
    # The config file has a dra section only in DRA mode.
    out = template(tmp_path, {**chosen, "dra.enabled": True})
    assert out.returncode == 0, out.stderr
    config = daemon_config([doc for doc in yaml.safe_load_all(out.stdout) if doc])
    for key, value in chosen.items():
        if not key.startswith("config."):
            continue  # a path the chart mounts: it is in the file only after the chart's joins
        rule = _rule_and_kind(key)[0]
        assert rule(_file_value(config, key)) == rule(value), key


@pytest.mark.parametrize("key", sorted(CHART_ONLY))
def test_the_chart_only_limits_refuse_the_hosts_root(key: str, tmp_path: Path) -> None:
    """A host directory mounted read-write is never /: the daemon would take it, the chart not."""
    rule = _rule_and_kind(key)[0]
    rule("/")
    out = template(tmp_path, {key: "/"})
    assert out.returncode != 0 and f'{key}: "/" must not be /' in out.stderr, out.stderr
