"""The versioned YAML configuration file: its keys, the rule for every value, and its loading.

Every problem is collected before failing, so one ``check-config`` run shows them all, and a file
yields either a complete validated overlay or an error: nothing is half-applied. The value rules
are shared with command-line and environment overrides so that both are judged alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from kae_deviceplugin.config.rules import Rule, did_you_mean, unquoted
from kae_deviceplugin.config.schema import ENGINE_FIELDS, OPTIONS, Option
from kae_deviceplugin.core.engines import ENGINES_BY_NAME
from kae_deviceplugin.errors import MISSING, ConfigError, InvalidConfig, show

VERSION: Final = "v1"
MAX_FILE_BYTES: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class FileConfig:
    """The settings one file names, validated and typed, keyed by ``Settings`` field names."""

    source: str
    settings: Mapping[str, object]
    engines: Mapping[str, Mapping[str, object]]
    env: Mapping[str, object]


# The rule of every field, keyed by Settings field name (env fields by EnvSettings field name),
# for flags and variables; the FILE_ ones judge the file's keys, whose booleans are YAML's.
SETTING_RULES: Final[Mapping[str, Rule]] = {
    o.field: o.rule for o in OPTIONS if not o.field.startswith("env.")
}
ENV_RULES: Final[Mapping[str, Rule]] = {
    o.name: o.rule for o in OPTIONS if o.field.startswith("env.")
}


def file_rule(option: Option) -> Rule:
    """The rule of ``option``'s file key: a boolean there is a YAML boolean, never quoted text
    (flags and variables, text by nature, take the row's rule and its spellings)."""
    return unquoted(option.rule) if option.kind == "boolean" else option.rule


FILE_SETTING_RULES: Final[Mapping[str, Rule]] = {
    o.field: file_rule(o) for o in OPTIONS if not o.field.startswith("env.")
}
FILE_ENV_RULES: Final[Mapping[str, Rule]] = {
    o.name: file_rule(o) for o in OPTIONS if o.field.startswith("env.")
}
ENGINE_RULES: Final[Mapping[str, Rule]] = {name: rule for name, (rule, _) in ENGINE_FIELDS.items()}
# The file's rules of the engine fields: a boolean or a count there is a YAML value, not text.
ENGINE_FILE_RULES: Final[Mapping[str, Rule]] = {
    name: unquoted(rule) if name in ("enabled", "shares") else rule
    for name, rule in ENGINE_RULES.items()
}
ENV_KEYS: Final = {o.file_key: o.name for o in OPTIONS if o.section == "env"}
_KEYS: dict[str, dict[str, str]] = {}  # section -> {key as written: field name}
for _option in OPTIONS:
    if _option.section != "env":
        _KEYS.setdefault(_option.section, {})[_option.file_key] = _option.field
_SECTIONS: Final = tuple(s for s in _KEYS if s)
_TOP_LEVEL = {k: k for k in ["version", *_KEYS[""], *_SECTIONS, "engines", "env"]}
# A nested key written at the top level is a common slip: suggest its full path.
_NESTED = {k: f"{s}.{k}" for s, keys in [*_KEYS.items(), ("env", ENV_KEYS)] if s for k in keys}


def join(path: str, key: str) -> str:
    # Quote keys that would make an error line ambiguous or split it (empty, spaces, newlines).
    shown = key if key.isprintable() and key.strip() == key != "" else repr(key)
    return f"{path}.{shown}" if path else shown


def unknown_key(path: str, key: str, candidates: Mapping[str, str]) -> ConfigError:
    """``candidates`` maps what a key is compared with to how a suggestion is shown."""
    guess = did_you_mean(key, candidates)
    hint = f"did you mean {candidates[guess]!r}?" if guess else "expected " + ", ".join(candidates)
    return ConfigError(join(path, key), MISSING, f"unknown key; {hint}")


def read_section(
    value: object,
    keys: Mapping[str, str],
    rules: Mapping[str, Rule],
    path: str,
    errors: list[ConfigError],
) -> dict[str, object]:
    """Validate a mapping of ``keys`` (as written -> field name); return the valid fields."""
    if not isinstance(value, Mapping):
        errors.append(ConfigError(path, value, "must be a mapping"))
        return {}
    fields: dict[str, object] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            errors.append(ConfigError(join(path, show(key)), MISSING, "keys must be strings"))
        elif key not in keys:
            errors.append(unknown_key(path, key, {k: k for k in keys}))
        else:
            try:
                fields[keys[key]] = rules[keys[key]](item)
            except ValueError as exc:
                errors.append(ConfigError(join(path, key), item, str(exc)))
    return fields


def read_engines(
    value: object,
    path: str,
    errors: list[ConfigError],
    field_rules: Mapping[str, Rule] = ENGINE_FILE_RULES,
) -> dict[str, Any]:
    """Validate ``{engine name: {field: value}}`` against the engine table, in document order
    (by the file's rules unless ``field_rules`` says: overrides take text spellings)."""
    keys = {key: key for key in field_rules}

    def engine_rule(name: str) -> Rule:
        return lambda item: MappingProxyType(
            read_section(item, keys, field_rules, join(path, name), errors)
        )

    names = {name: name for name in ENGINES_BY_NAME}
    rules = {name: engine_rule(name) for name in ENGINES_BY_NAME}
    return read_section(value, names, rules, path, errors)


def parse_config(data: object, source: str) -> FileConfig:
    """Validate a loaded YAML document; raise InvalidConfig listing every problem."""
    if not isinstance(data, Mapping):
        raise InvalidConfig.whole(source, "the top level must be a mapping of settings")
    errors: list[ConfigError] = []
    if data.get("version", MISSING) != VERSION:
        why = "is required" if "version" not in data else "is not supported"
        errors.append(ConfigError("version", data.get("version", MISSING), f"{why}; use {VERSION}"))
    settings: dict[str, object] = {}
    engines: dict[str, Any] = {}
    env: dict[str, object] = {}
    for key, item in data.items():
        if key in _KEYS[""]:
            settings |= read_section({key: item}, _KEYS[""], FILE_SETTING_RULES, "", errors)
        elif key in _SECTIONS:
            settings |= read_section(item, _KEYS[key], FILE_SETTING_RULES, key, errors)
        elif key == "engines":
            engines = read_engines(item, key, errors)
        elif key == "env":
            env = read_section(item, ENV_KEYS, FILE_ENV_RULES, key, errors)
        elif not isinstance(key, str):
            errors.append(ConfigError(show(key), MISSING, "keys must be strings"))
        elif key != "version":
            errors.append(unknown_key("", key, _TOP_LEVEL | _NESTED))
    if errors:
        raise InvalidConfig(errors, source)
    return FileConfig(source, *(MappingProxyType(part) for part in (settings, engines, env)))


def parse_config_text(text: str, source: str) -> FileConfig:
    """Parse and validate YAML text; every failure, syntax included, is an InvalidConfig."""
    # PyYAML costs ~2 MiB of resident memory; a daemon run without a file never loads it.
    import yaml  # noqa: PLC0415

    from kae_deviceplugin.config.yaml_loader import StrictLoader  # noqa: PLC0415

    try:
        data = yaml.load(text, Loader=StrictLoader)  # a SafeLoader: builds plain data only
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InvalidConfig.whole(source, f"invalid YAML{where}: {exc.problem}") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise InvalidConfig.whole(source, f"invalid YAML: {exc}") from None
    except ValueError as exc:  # a scalar its type cannot hold: 2023-02-30, a 5000-digit int
        raise InvalidConfig.whole(source, f"invalid YAML: a value cannot be read: {exc}") from None
    if data is None:
        raise InvalidConfig.whole(
            source, f"the file is empty; it needs at least version: {VERSION}"
        )
    return parse_config(data, source)


def load_config_file(path: str | Path) -> FileConfig:
    """Read, parse and validate a configuration file; raise InvalidConfig on any problem."""
    try:
        with Path(path).open("rb") as stream:
            raw = stream.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InvalidConfig.whole(str(path), f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise InvalidConfig.whole(str(path), f"is larger than {MAX_FILE_BYTES} bytes")
    try:
        return parse_config_text(raw.decode("utf-8-sig"), str(path))
    except UnicodeDecodeError:
        raise InvalidConfig.whole(str(path), "is not UTF-8 text") from None
