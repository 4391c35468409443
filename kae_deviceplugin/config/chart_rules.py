"""The chart's value rules, made from the settings table: one source for the daemon and the chart.

The Helm chart writes some of its values into the daemon's config file unchanged
(``config.scanInterval`` becomes ``scanInterval``). For those values ``values.schema.json`` must
refuse what the daemon refuses and accept what it accepts, so its nodes are generated here from
each row's kind and from the spellings in :mod:`kae_deviceplugin.config.rules`
(``scripts/render-chart-schema.py`` writes them; a test proves the checked-in files current).

JSON Schema cannot add up a duration such as ``59m61s``, so the range of a duration written as
text is checked by a generated template helper (``_value_rules.tpl``), with the same units and
bound; the schema checks its spelling and the range of a plain number.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from kae_deviceplugin.config import rules
from kae_deviceplugin.config.schema import OPTIONS_BY_FIELD, Kind
from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.ids import MAX_SHARES
from kae_deviceplugin.core.views import FUNCTIONS

Node = dict[str, Any]

# Chart value -> the settings row whose rule judges it (the daemon reads the value as written).
CHART_VALUES: Final[Mapping[str, str]] = {
    "kubeletRootDir": "kubelet_root",
    "cdi.specDir": "cdi_dir",
    "config.registration": "registration",
    "config.scanInterval": "scan_interval",
    "config.allocationPolicy": "allocation_policy",
    "config.containerSysfsView": "container_sysfs_view",
    "config.stateDir": "state_dir",
    "config.env.uadkNumaHint": "env.uadk_numa_hint",
    "config.env.opensslEngines": "env.openssl_engines",
    "config.log.level": "log_level",
    "config.log.format": "log_format",
    "config.dra.unhealthyTaintEffect": "unhealthy_taint_effect",
    "config.dra.sharedEngines": "shared_engines",
}
# Chart-only limits on top of the daemon's rule, each with its reason: the chart mounts these
# directories from the host read-write, and the host's / is never one to hand over.
CHART_ONLY: Final[Mapping[str, Node]] = {
    "kubeletRootDir": {"not": {"pattern": "^/+$"}},
    "config.stateDir": {"not": {"pattern": "^/+$"}},
}
# A configuration's name names its DaemonSet (<fullname>-<name>, at most 63 characters) and is a
# node label's value: a DNS label, short enough to leave room for the release's name.
CONFIG_NAME_PATTERN: Final = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
CONFIG_NAME_MAX: Final = 30
DURATION_TEMPLATE: Final = "kae.rules.duration"
# Every chart value that is a duration written as text, checked by DURATION_TEMPLATE.
DURATION_VALUES: Final = tuple(
    key for key, field in CHART_VALUES.items() if OPTIONS_BY_FIELD[field].kind == "duration"
)


def _words(words: tuple[str, ...]) -> str:
    """A pattern for one of ``words`` in any case, with blanks around: as the daemon reads them."""
    return r"(?i)^\s*(" + "|".join(words) + r")\s*$"


def _engine_words() -> str:
    """Engine names separated by commas or blanks, any case, or nothing (rules.engine_list)."""
    names = "|".join(engine.name for engine in ENGINES)
    return rf"(?i)^[\s,]*(({names})([\s,]+|$))*$"


def _count(maximum: int) -> Node:
    """1 to ``maximum``, as a number or as text (``"4"``), as ``rules.shares`` takes it."""
    numbers = "|".join(str(n) for n in range(maximum, 0, -1))
    return {
        "type": ["integer", "string"],
        "minimum": 1,
        "maximum": maximum,
        "pattern": r"^\s*\+?0*(" + numbers + r")\s*$",
    }


def kind_node(kind: Kind, choices: tuple[str, ...] = ()) -> Node:
    """The JSON Schema of a value of ``kind``: what its rule in ``rules`` accepts."""
    absolute = r"/[^\x00]*"
    nodes: dict[str, Node] = {
        "duration": {
            "type": ["number", "string"],
            "exclusiveMinimum": 0,
            "maximum": rules.MAX_SCAN_INTERVAL,
            "pattern": r"^\s*" + rules.DURATION_PATTERN + r"\s*$",
        },
        "boolean": {
            "type": ["boolean", "string"],
            "pattern": _words((*rules.TRUE_WORDS, *rules.FALSE_WORDS)),
        },
        "choice": {"type": "string", "pattern": _words(choices)},
        "path": {"type": "string", "pattern": f"^{absolute}$"},
        "optional-path": {"type": ["string", "null"], "pattern": f"^({absolute})?$"},
        "count": _count(MAX_SHARES),
        "engine-list": {
            "type": ["string", "array"],
            "pattern": _engine_words(),
            "items": {"type": "string", "pattern": _engine_words()},
        },
    }
    return dict(nodes[kind])


def generated_nodes() -> dict[str, Node]:
    """Chart value path -> its schema node, for every value the daemon reads as written."""
    nodes: dict[str, Node] = {}
    for key, field in CHART_VALUES.items():
        option = OPTIONS_BY_FIELD[field]
        node = kind_node(option.kind, option.choices)
        if option.choices:
            node["description"] = option.help + " One of: " + ", ".join(option.choices) + "."
        else:
            node["description"] = option.help
        nodes[key] = node | CHART_ONLY.get(key, {})
    for engine in ENGINES:
        prefix = f"config.engines.{engine.name}"
        nodes[f"{prefix}.shares"] = kind_node("count") | {
            "description": f"Devices advertised per {engine.name} function (1 to {MAX_SHARES})."
        }
        nodes[f"{prefix}.functions"] = kind_node("choice", FUNCTIONS) | {
            "description": "Which PCI functions to advertise. One of: " + ", ".join(FUNCTIONS) + "."
        }
    return nodes


def with_generated(schema: Node) -> Node:
    """``schema`` (the chart's values.schema.json) with every generated node put in its place.

    Each parent object (its ``required`` and ``additionalProperties``) stays as written there.
    """
    for key, node in generated_nodes().items():
        parent = schema
        *parents, name = key.split(".")
        for part in parents:
            parent = parent["properties"][part]
        parent["properties"][name] = node
    schema["properties"]["configs"] = {
        "type": "object",
        "description": "Per-node configurations: name -> a part of config, for the nodes "
        "labelled openfuyao.com/kae.config=<name>.",
        "propertyNames": {"pattern": CONFIG_NAME_PATTERN, "maxLength": CONFIG_NAME_MAX},
        "additionalProperties": _without_required(schema["properties"]["config"]),
    }
    return schema


def _without_required(node: Node) -> Node:
    """``node`` where no key is required: a per-node configuration overrides any part of it."""
    copy = {key: value for key, value in node.items() if key != "required"}
    if "properties" in copy:
        copy["properties"] = {
            key: _without_required(value) if isinstance(value, dict) else value
            for key, value in copy["properties"].items()
        }
    return copy


def render_schema(text: str) -> str:
    """The file values.schema.json should hold, given what it holds now."""
    return json.dumps(with_generated(json.loads(text)), indent=2, ensure_ascii=False) + "\n"


def render_duration_template() -> str:
    """The chart helper that refuses a duration text outside (0s, 1h], as the daemon does."""
    units = " ".join(f'"{unit}" {factor!r}' for unit, factor in rules.UNITS.items())
    number = json.dumps("^" + rules.NUMBER_PATTERN)
    part = json.dumps(f"{rules.NUMBER_PATTERN}({'|'.join(rules.UNITS)})")
    bare = json.dumps(f"^{rules.NUMBER_PATTERN}$")
    return f"""{{{{- /*
Generated by scripts/render-chart-schema.py from the daemon's value rules: do not edit.
A duration written as text must lie above 0s and at most {rules.MAX_SCAN_INTERVAL:g}s, as the daemon
requires; values.schema.json has checked its spelling. Called as
(include "{DURATION_TEMPLATE}" (list "<value path>" <value>)); renders nothing.
*/}}}}
{{{{- define "{DURATION_TEMPLATE}" -}}}}
{{{{- $key := index . 0 }}}}{{{{- $value := index . 1 }}}}
{{{{- if kindIs "string" $value }}}}
{{{{- $units := dict {units} }}}}
{{{{- $text := trim $value }}}}
{{{{- $sign := 1.0 }}}}
{{{{- if hasPrefix "-" $text }}}}{{{{- $sign = -1.0 }}}}{{{{- end }}}}
{{{{- $text = trimPrefix "+" (trimPrefix "-" $text) }}}}
{{{{- $seconds := 0.0 }}}}
{{{{- if regexMatch {bare} $text }}}}
{{{{- $seconds = float64 $text }}}}
{{{{- else }}}}
{{{{- range regexFindAll {part} $text -1 }}}}
{{{{- $number := regexFind {number} . }}}}
{{{{- $seconds = addf $seconds (mulf (float64 $number) (get $units (trimPrefix $number .))) }}}}
{{{{- end }}}}
{{{{- end }}}}
{{{{- $seconds = mulf $sign $seconds }}}}
{{{{- if or (le $seconds 0.0) (gt $seconds {rules.MAX_SCAN_INTERVAL!r}) }}}}
{{{{- fail (printf "%s: %q {rules.SCAN_INTERVAL_WHY}" $key $value) }}}}
{{{{- end }}}}
{{{{- end }}}}
{{{{- end }}}}
"""
