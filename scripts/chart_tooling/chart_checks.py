"""The chart's generated value checks (``templates/_value_rules.tpl``): spelling and range of every
value the daemon reads as written, with the daemon's own words for a refusal.

Helm checks values.schema.json first and quotes a failed ``pattern`` as it is written, so a
mistyped log level read ``does not match pattern '(?i)^\\s*(debug|...)\\s*$'``. The schema
therefore holds only types (:mod:`scripts.chart_tooling.chart_rules`); this module writes a
table (chart value -> pattern, bounds and the sentence the daemon's rule says) and the template
that walks ``config``, every ``configs.<name>`` and the chart's other daemon values with it,
failing with ``config.log.level: "loud" must be one of debug, info, warning, error``.
"""

from __future__ import annotations

import json
from typing import Any, Final

from kae_deviceplugin.config import rules
from kae_deviceplugin.config.file import ENGINE_FILE_RULES, file_rule
from kae_deviceplugin.config.schema import OPTIONS, OPTIONS_BY_FIELD, Kind
from kae_deviceplugin.core.engines import ENGINES, MAX_VFS
from kae_deviceplugin.core.ids import MAX_SHARES
from kae_deviceplugin.core.views import FUNCTIONS
from scripts.chart_tooling.chart_rules import (
    CHART_ONLY,
    CHART_VALUES,
    CONFIG_NAME_MAX,
    CONFIG_NAME_PATTERN,
    OPTIONAL_VALUES,
    misplaced,
)

Check = dict[str, Any]
DURATION_TEMPLATE: Final = "kae.rules.duration"
CONFIG_NAME_WHY: Final = (
    f"a configuration's name must be a DNS label (lower-case letters, digits and '-', starting "
    f"and ending with a letter or digit) of at most {CONFIG_NAME_MAX} characters: it names a "
    "DaemonSet and is the value of a node label"
)


def _words(words: tuple[str, ...], optional: bool = False) -> str:
    """One of ``words`` in any case, with blanks around, as the daemon reads them (or empty)."""
    one = r"\s*(" + "|".join(words) + r")\s*"
    return f"(?i)^({one})?$" if optional else f"(?i)^{one}$"


def _engine_words() -> str:
    """Engine names separated by commas or blanks, any case, or nothing (rules.engine_list)."""
    names = "|".join(engine.name for engine in ENGINES)
    return rf"(?i)^[\s,]*(({names})([\s,]+|$))*$"


def _why(rule: rules.Rule) -> str:
    """What the daemon's rule says about a value it cannot read at all: its own sentence."""
    try:
        rule(object())
    except ValueError as err:
        return str(err)
    raise AssertionError(f"{rule} accepts anything")  # pragma: no cover -- every rule refuses


def _why_text(rule: rules.Rule) -> str:
    """What the file's rule says about quoted text where it wants a YAML value."""
    try:
        rule("text")
    except ValueError as err:
        return str(err)
    raise AssertionError(f"{rule} takes text")  # pragma: no cover -- used for strict rules only


def kind_check(kind: Kind, rule: rules.Rule, choices: tuple[str, ...] = ()) -> Check:
    """The check of a value of ``kind``: a pattern for text, bounds for a number, and the
    daemon's sentences for each."""
    why = _why(rule)
    absolute = r"/[^\x00]*"
    numbers = "|".join(str(n) for n in range(MAX_SHARES, 0, -1))
    patterns: dict[Kind, str] = {
        "duration": r"^\s*" + rules.DURATION_PATTERN + r"\s*$",
        "boolean": _words((*rules.TRUE_WORDS, *rules.FALSE_WORDS)),
        "choice": _words(choices),
        "path": f"^{absolute}$",
        "optional-path": f"^({absolute})?$",
        "count": r"^\s*\+?0*(" + numbers + r")\s*$",
        "engine-list": _engine_words(),
        "vf-count": r"(?i)^\s*max\s*$",
    }
    check: Check = {"kind": kind, "pattern": patterns[kind], "why": why, "numeric": False}
    if kind in ("boolean", "count"):  # the file takes YAML's booleans and integers, not text
        check |= {"pattern": "", "why": _why_text(rule), "noText": True}
    if kind == "duration":
        bounds = {"min": 0.0, "exclusiveMin": True, "max": rules.MAX_SCAN_INTERVAL}
        check |= {"numeric": True, "rangeWhy": rules.SCAN_INTERVAL_WHY} | bounds
    elif kind == "count":
        bounds = {"min": 1.0, "exclusiveMin": False, "max": float(MAX_SHARES)}
        check |= {"numeric": True, "rangeWhy": why} | bounds
    elif kind == "vf-count":
        bounds = {"min": 0.0, "exclusiveMin": False, "max": float(MAX_VFS)}
        check |= {"numeric": True, "rangeWhy": why} | bounds
    elif kind == "engine-list":
        check["why"] = f"{why} ({', '.join(e.name for e in ENGINES)})"
    return check


def checks() -> dict[str, Check]:
    """Chart value path -> its check, for every value the daemon reads as written."""
    table: dict[str, Check] = {}
    for key, field in CHART_VALUES.items():
        option = OPTIONS_BY_FIELD[field]
        check = kind_check(option.kind, file_rule(option), option.choices)  # written in the file
        if key in OPTIONAL_VALUES:
            check["pattern"] = _words(option.choices, optional=True)
            check["why"] += ", or empty"
        check["notRoot"] = CHART_ONLY.get(key, "")
        table[key] = check
    for engine in ENGINES:
        prefix = f"config.engines.{engine.name}"
        shares, functions = ENGINE_FILE_RULES["shares"], ENGINE_FILE_RULES["functions"]
        table[f"{prefix}.shares"] = kind_check("count", shares) | {"notRoot": ""}
        table[f"{prefix}.functions"] = kind_check("choice", functions, FUNCTIONS) | {"notRoot": ""}
        vfs = ENGINE_FILE_RULES["vfs"]
        table[f"{prefix}.vfs"] = kind_check("vf-count", vfs) | {"notRoot": ""}
    return table


def _json(value: object) -> str:
    """JSON for a template's body: indented, so that no ``{{`` can open a template action."""
    text = json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False)
    assert "{{" not in text and "}}" not in text, text
    return text


_HEADER = """{{- /*
Generated by scripts/render-chart-schema.py from the daemon's value rules: do not edit.
"kae.rules.values" checks the spelling and range of every value the daemon reads as written
(values.schema.json has checked their types) and fails with the daemon's own words; templates/
value-checks.yaml calls it once. Per value: kae.rules.table; the check: kae.rules.check.
kae.rules.restartKeys: the config file's keys a reload cannot apply (hashed into the pod
template by kae.restartChecksum).
*/}}
"""

_CHECK = """{{- define "kae.rules.check" -}}
{{- $key := index . 0 }}{{- $value := index . 1 }}{{- $rule := index . 2 }}
{{- if and (kindIs "string" $value) $rule.noText }}
{{- fail (printf "%s: %s %s" $key (toJson $value) $rule.why) }}
{{- else if kindIs "string" $value }}
{{- if not (regexMatch $rule.pattern $value) }}
{{- fail (printf "%s: %s %s" $key (toJson $value) $rule.why) }}
{{- end }}
{{- if and $rule.notRoot (regexMatch "^/+$" $value) }}
{{- fail (printf "%s: %s %s" $key (toJson $value) $rule.notRoot) }}
{{- end }}
{{- if eq $rule.kind "duration" }}{{ include "@DURATION@" (list $key $value) }}{{ end }}
{{- else if and $rule.numeric (or (kindIs "float64" $value) (kindIs "int64" $value)
      (kindIs "int" $value)) }}
{{- $number := float64 $value }}
{{- if or (lt $number $rule.min) (and $rule.exclusiveMin (le $number $rule.min))
      (gt $number $rule.max) }}
{{- fail (printf "%s: %v %s" $key $value $rule.rangeWhy) }}
{{- end }}
{{- else if kindIs "slice" $value }}
{{- range $value }}
{{- if and (kindIs "string" .) (not (regexMatch $rule.pattern .)) }}
{{- fail (printf "%s: %s %s" $key (toJson .) $rule.why) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
"""

_VALUES = """{{- define "kae.rules.values" -}}
{{- $table := include "kae.rules.table" . | fromJson }}
{{- $roots := list (list "" .Values) }}
{{- range $name, $partial := .Values.configs }}
{{- if or (not (regexMatch @NAME_PATTERN@ $name)) (gt (len $name) @NAME_MAX@) }}
{{- fail (printf "configs.%s: @NAME_WHY@" $name) }}
{{- end }}
{{- $roots = append $roots (list (printf "configs.%s" $name) (dict "config" $partial)) }}
{{- end }}
{{- range $key := keys $table | sortAlpha }}
{{- $rule := get $table $key }}
{{- range $root := $roots }}
{{- $prefix := index $root 0 }}
{{- if or (not $prefix) (hasPrefix "config." $key) }}
{{- $node := index $root 1 }}{{- $found := true }}
{{- range $part := splitList "." $key }}
{{- if and $found (kindIs "map" $node) (hasKey $node $part) }}
{{- $node = index $node $part }}
{{- else }}
{{- $found = false }}
{{- end }}
{{- end }}
{{- if $found }}
{{- $shown := $key }}
{{- if $prefix }}{{- $shown = printf "%s.%s" $prefix (trimPrefix "config." $key) }}{{- end }}
{{- include "kae.rules.check" (list $shown $node $rule) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- range $key, $why := include "kae.rules.misplaced" . | fromJson }}
{{- if hasKey $.Values.dra (trimPrefix "dra." $key) }}
{{- fail (printf "%s: %s" $key $why) }}
{{- end }}
{{- end }}
{{- end }}
"""


def render_value_template() -> str:
    """templates/_value_rules.tpl: the tables, the check, the walk and the duration helper."""
    tables = (
        '{{- define "kae.rules.table" -}}\n' + _json(checks()) + "\n{{- end }}\n"
        '{{- define "kae.rules.misplaced" -}}\n' + _json(misplaced()) + "\n{{- end }}\n"
        '{{- define "kae.rules.restartKeys" -}}\n' + _json(restart_keys()) + "\n{{- end }}\n"
    )
    values = (
        _VALUES.replace("@NAME_PATTERN@", json.dumps(CONFIG_NAME_PATTERN))
        .replace("@NAME_MAX@", str(CONFIG_NAME_MAX))
        .replace("@NAME_WHY@", CONFIG_NAME_WHY)
    )
    check = _CHECK.replace("@DURATION@", DURATION_TEMPLATE)
    return _HEADER + tables + check + values + _duration_template()


def _duration_template() -> str:
    """The helper that refuses a duration text outside (0s, 1h], as the daemon does: JSON
    Schema cannot add up ``59m61s``."""
    units = " ".join(f'"{unit}" {factor!r}' for unit, factor in rules.UNITS.items())
    number = json.dumps("^" + rules.NUMBER_PATTERN)
    part = json.dumps(f"{rules.NUMBER_PATTERN}({'|'.join(rules.UNITS)})")
    bare = json.dumps(f"^{rules.NUMBER_PATTERN}$")
    limit = repr(rules.MAX_SCAN_INTERVAL)
    return f"""{{{{- define "{DURATION_TEMPLATE}" -}}}}
{{{{- $key := index . 0 }}}}{{{{- $value := index . 1 }}}}
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
{{{{- if or (le $seconds 0.0) (gt $seconds {limit}) }}}}
{{{{- fail (printf "%s: %q {rules.SCAN_INTERVAL_WHY}" $key $value) }}}}
{{{{- end }}}}
{{{{- end }}}}
"""


def restart_keys() -> list[str]:
    """The config file's keys a reload cannot apply (the daemon's table says so): the chart
    hashes their values into the pod template, so that `helm upgrade` of one rolls the pods."""
    return sorted(option.key for option in OPTIONS if option.reload == "restart")
