"""How defaults, the file, the environment and flags combine into one ``Settings``.

Precedence is flags > environment > file > defaults. The CLI decides which options came from the
command line or the environment and hands over only those, as ``overrides``; they are judged by the
same rules as the file (see :mod:`kae_deviceplugin.config.rules`), so a bad value fails alike
wherever it was written.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from pathlib import Path
from types import MappingProxyType

from kae_deviceplugin.config.file import (
    ENGINE_RULES,
    ENV_RULES,
    SETTING_RULES,
    FileConfig,
    load_config_file,
    read_engines,
    read_section,
)
from kae_deviceplugin.config.rules import did_you_mean, node_name
from kae_deviceplugin.config.schema import ENABLE_ENGINES_FLAG, OPTIONS_BY_FIELD, restart_only
from kae_deviceplugin.config.settings import EngineSettings, EnvSettings, Settings
from kae_deviceplugin.core.engines import ENGINES, ENGINES_BY_NAME
from kae_deviceplugin.errors import MISSING, ConfigError, InvalidConfig


def _label(key: str, sources: Mapping[str, str]) -> str:
    option = OPTIONS_BY_FIELD.get(key)
    return sources.get(key) or (option.flag if option else "--" + key.replace("_", "-"))


def where_set(field: str, sources: Mapping[str, str], file: FileConfig | None) -> str:
    """How the user wrote setting ``field``, for a message about its value: the flag or
    ``KAE_DP_*`` variable that gave it, else ``<file>: <key>`` when the file did, else the flag
    (the default's name)."""
    if field in sources:
        return sources[field]
    if file is not None and field in file.settings:
        return f"{file.source}: {OPTIONS_BY_FIELD[field].key}"
    return _label(field, {})


def resolve_settings(
    file: FileConfig | None,
    overrides: Mapping[str, object],
    *,
    sources: Mapping[str, str] | None = None,
) -> Settings:
    """Defaults, overlaid by ``file``, overlaid by ``overrides`` (flags and KAE_DP_* variables).

    ``overrides`` is keyed by ``Settings`` field name, or ``env.<field>``. ``engines`` takes a
    partial ``{engine: {field: value}}`` (see ``enable_only``) and ``env`` a partial
    ``{field: value}``; both merge field by field. ``sources`` names each override in errors
    (such as ``KAE_DP_SCAN_INTERVAL``); unnamed ones are shown as ``--scan-interval``. Raise
    InvalidConfig listing every bad override.
    """
    sources = sources or {}
    top: dict[str, object] = dict(file.settings) if file else {}
    engines: dict[str, dict[str, object]] = {name: {} for name in ENGINES_BY_NAME}
    env: dict[str, object] = dict(file.env) if file else {}
    for name, engine_fields in (file.engines if file else {}).items():
        engines[name].update(engine_fields)
    errors: list[ConfigError] = []
    for key, value in overrides.items():
        label = _label(key, sources)
        if key == "engines":
            for name, engine_fields in read_engines(value, label, errors, ENGINE_RULES).items():
                engines[name].update(engine_fields)
        elif key == "env":
            env |= read_section(value, {name: name for name in ENV_RULES}, ENV_RULES, label, errors)
        elif key in SETTING_RULES or (key.startswith("env.") and key[4:] in ENV_RULES):
            # One setting: a Settings field, or "env.<field>" for one env field (as a flag is).
            target, name = (env, key[4:]) if key.startswith("env.") else (top, key)
            rule = ENV_RULES[name] if target is env else SETTING_RULES[name]
            try:
                target[name] = rule(value)
            except ValueError as exc:
                errors.append(ConfigError(label, value, str(exc)))
        else:
            guess = did_you_mean(key, [*SETTING_RULES, "engines", "env"])
            hint = f"; did you mean {guess!r}?" if guess else ""
            errors.append(ConfigError(label, MISSING, f"unknown setting {key!r}{hint}"))
    if errors:
        raise InvalidConfig(errors)
    return _build(top, engines, env)


def _build(
    top: Mapping[str, object],
    engines: Mapping[str, Mapping[str, object]],
    env: Mapping[str, object],
) -> Settings:
    # Every value here has passed the rule of its field, and each rule returns its field's type
    # (tests/config/test_schema.py holds every rule against its field's annotation). The checker
    # cannot follow a table from names to types, so these three calls are where it is told.
    return Settings(
        **top,  # type: ignore[arg-type]
        engines=MappingProxyType(
            {n: EngineSettings(**f) for n, f in engines.items()}  # type: ignore[arg-type]
        ),
        env=EnvSettings(**env),  # type: ignore[arg-type]
    )


NODE_NAME_VARIABLE = "NODE_NAME"  # the downward API's node name, DRA's and auto's fallback


def check_node_name_variable(settings: Settings, environ: Mapping[str, str]) -> None:
    """Judge $NODE_NAME by ``--node-name``'s rule where DRA mode will take it (no node name set):
    a bad one is an InvalidConfig naming the variable, as a bad flag value is."""
    value = environ.get(NODE_NAME_VARIABLE)
    if settings.mode == "device-plugin" or settings.node_name or not value:
        return
    try:
        node_name(value)
    except ValueError as exc:
        raise InvalidConfig([ConfigError(NODE_NAME_VARIABLE, value, str(exc))]) from None


def parse_engine_list(text: str, *, label: str = ENABLE_ENGINES_FLAG) -> frozenset[str]:
    """Engine names from ``hpre,sec`` (commas or spaces, any case), checked against the table."""
    names = [word.lower() for word in text.replace(",", " ").split()]
    if not names:
        why = "names no engine; known engines: " + ", ".join(ENGINES_BY_NAME)
        raise InvalidConfig([ConfigError(label, text, why)])
    errors = []
    for name in names:
        if name not in ENGINES_BY_NAME:
            guess = did_you_mean(name, ENGINES_BY_NAME)
            hint = f"did you mean {guess!r}?" if guess else "known: " + ", ".join(ENGINES_BY_NAME)
            errors.append(ConfigError(label, name, f"unknown engine; {hint}"))
    if errors:
        raise InvalidConfig(errors)
    return frozenset(names)


def enable_only(names: Set[str]) -> dict[str, dict[str, object]]:
    """The ``engines`` override that enables exactly ``names`` and disables every other engine."""
    return {engine.name: {"enabled": engine.name in names} for engine in ENGINES}


def restart_required(old: Settings, new: Settings) -> list[str]:
    """Names of the changed settings that a reload cannot apply (paths, metrics, registration).

    A path derived from the kubelet root counts as changed only when its effective value is.
    """

    def value(settings: Settings, name: str) -> object:
        return getattr(settings, f"effective_{name}", getattr(settings, name))

    changed = [name for name in restart_only() if value(old, name) != value(new, name)]
    return changed


def file_keys(fields: list[str]) -> str:
    """Settings named as the configuration file spells them (``dra.unhealthyTaintEffect``)."""
    return ", ".join(OPTIONS_BY_FIELD[f].key if f in OPTIONS_BY_FIELD else f for f in fields)


def check_config(path: str | Path) -> list[str]:
    """Every problem of the file at ``path``, one human-readable line each; empty when valid."""
    try:
        resolve_settings(load_config_file(path), {})
    except InvalidConfig as exc:
        return exc.lines()
    return []
