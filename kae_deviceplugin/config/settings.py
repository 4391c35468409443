"""Frozen settings of the daemon and how defaults, the file, the environment and flags combine.

Precedence is flags > environment > file > defaults. The CLI decides which options came from the
command line or the environment and hands over only those, as ``overrides``; they are judged by the
same rules as the file (see ``config_file``), so a bad value fails alike wherever it was written.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kae_deviceplugin.config.file import (
    ENV_RULES,
    MISSING,
    SETTING_RULES,
    ConfigError,
    FileConfig,
    InvalidConfig,
    did_you_mean,
    load_config_file,
    parse_duration,
    read_engines,
    read_section,
)
from kae_deviceplugin.core.engines import ENGINES, ENGINES_BY_NAME
from kae_deviceplugin.core.model import Function

__all__ = [
    "ConfigError",
    "EngineSettings",
    "EnvSettings",
    "FileConfig",
    "InvalidConfig",
    "Settings",
    "changed_resources",
    "check_config",
    "enable_only",
    "load_config_file",
    "parse_duration",
    "parse_engine_list",
    "resolve_settings",
    "restart_required",
]


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """How one engine is served."""

    enabled: bool = True
    shares: int = 1  # how many containers may hold one device at once
    functions: str = "all"  # all | pf | vf | prefer-vf

    def serves(self, function: Function, engine_has_vfs: bool) -> bool:
        """Whether a device on ``function`` is advertised, given whether its engine has any VF."""
        if self.functions == "all":
            return True
        if self.functions == "prefer-vf":
            # A PF that has spawned VFs shares its queues with them; serving both would oversell.
            return function is (Function.VF if engine_has_vfs else Function.PF)
        return function.value == self.functions


@dataclass(frozen=True, slots=True)
class EnvSettings:
    """Environment variables added to containers on Allocate."""

    uadk_numa_hint: bool = False  # set WD_<ALG>_CTX_NUM for the allocated device's NUMA node
    openssl_engines: str | None = None  # value of OPENSSL_ENGINES; None leaves it unset


def _default_engines() -> Mapping[str, EngineSettings]:
    return MappingProxyType({engine.name: EngineSettings() for engine in ENGINES})


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the daemon needs; the defaults suit a stock kubelet on a KAE host."""

    sysfs_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")
    kubelet_root: Path = Path("/var/lib/kubelet")
    device_plugin_dir: Path | None = None  # None: <kubelet_root>/device-plugins
    pod_resources_socket: Path | None = None  # None: <kubelet_root>/pod-resources/kubelet.sock
    state_dir: Path = Path("/var/lib/kae-deviceplugin")
    nfd_features_file: Path | None = Path("/etc/kubernetes/node-feature-discovery/features.d/kae")
    cdi_dir: Path = Path("/var/run/cdi")
    scan_interval: float = 1.0
    registration: str = "auto"  # auto | kubelet-socket | plugin-watcher
    metrics_address: str = ":9410"  # "" disables the metrics endpoint
    log_level: str = "info"
    log_format: str = "text"
    allocation_policy: str = "balanced"  # balanced | packed
    container_sysfs_view: bool = True
    cdi: bool = False
    engines: Mapping[str, EngineSettings] = field(default_factory=_default_engines)
    env: EnvSettings = field(default_factory=EnvSettings)

    @property
    def effective_device_plugin_dir(self) -> Path:
        return self.device_plugin_dir or self.kubelet_root / "device-plugins"

    @property
    def effective_pod_resources_socket(self) -> Path:
        return self.pod_resources_socket or self.kubelet_root / "pod-resources" / "kubelet.sock"

    def engine(self, name: str) -> EngineSettings:
        """The settings of engine ``name``; defaults for an engine the mapping lacks."""
        return self.engines.get(name) or EngineSettings()


def _label(key: str, sources: Mapping[str, str]) -> str:
    return sources.get(key) or "--" + key.replace("_", "-")


def resolve_settings(
    file: FileConfig | None,
    overrides: Mapping[str, object],
    *,
    sources: Mapping[str, str] | None = None,
) -> Settings:
    """Defaults, overlaid by ``file``, overlaid by ``overrides`` (flags and KAE_DP_* variables).

    ``overrides`` is keyed by ``Settings`` field name. ``engines`` takes a partial
    ``{engine: {field: value}}`` (see ``enable_only``) and ``env`` a partial ``{field: value}``;
    both merge field by field. ``sources`` names each override in errors (such as
    ``KAE_DP_SCAN_INTERVAL``); unnamed ones are shown as ``--scan-interval``. Raise InvalidConfig
    listing every bad override.
    """
    sources = sources or {}
    top: dict[str, Any] = dict(file.settings) if file else {}
    engines: dict[str, dict[str, Any]] = {name: {} for name in ENGINES_BY_NAME}
    env: dict[str, Any] = dict(file.env) if file else {}
    for name, engine_fields in (file.engines if file else {}).items():
        engines[name].update(engine_fields)
    errors: list[ConfigError] = []
    for key, value in overrides.items():
        label = _label(key, sources)
        if key == "engines":
            for name, engine_fields in read_engines(value, label, errors).items():
                engines[name].update(engine_fields)
        elif key == "env":
            env |= read_section(value, {name: name for name in ENV_RULES}, ENV_RULES, label, errors)
        elif key in SETTING_RULES:
            try:
                top[key] = SETTING_RULES[key](value)
            except ValueError as exc:
                errors.append(ConfigError(label, value, str(exc)))
        else:
            guess = did_you_mean(key, [*SETTING_RULES, "engines", "env"])
            hint = f"; did you mean {guess!r}?" if guess else ""
            errors.append(ConfigError(label, MISSING, f"unknown setting {key!r}{hint}"))
    if errors:
        raise InvalidConfig(errors)
    return Settings(
        **top,
        engines=MappingProxyType({n: EngineSettings(**f) for n, f in engines.items()}),
        env=EnvSettings(**env),
    )


def parse_engine_list(text: str, *, label: str = "--enable-engines") -> frozenset[str]:
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


# Settings whose change alters what every served resource answers (Allocate, preferred allocation).
_SERVING_WIDE = ("allocation_policy", "container_sysfs_view", "cdi", "env")
_RESTART_ONLY = (
    "sysfs_root",
    "dev_root",
    "kubelet_root",
    "effective_device_plugin_dir",
    "effective_pod_resources_socket",
    "state_dir",
    "nfd_features_file",
    "cdi_dir",
    "metrics_address",
    "registration",
)


def changed_resources(old: Settings, new: Settings) -> frozenset[str]:
    """Resources whose servers must restart or republish when ``old`` is reloaded as ``new``."""
    wide = any(getattr(old, name) != getattr(new, name) for name in _SERVING_WIDE)
    changed = set()
    for engine in ENGINES:
        before, after = old.engine(engine.name), new.engine(engine.name)
        if not (before.enabled or after.enabled):
            continue  # served neither before nor after: nothing to restart
        if wide or before != after:
            changed.add(engine.resource)
    return frozenset(changed)


def restart_required(old: Settings, new: Settings) -> list[str]:
    """Names of the changed settings that a reload cannot apply (paths, metrics, registration)."""
    changed = [name for name in _RESTART_ONLY if getattr(old, name) != getattr(new, name)]
    return [name.removeprefix("effective_") for name in changed]


def check_config(path: str | Path) -> list[str]:
    """Every problem of the file at ``path``, one human-readable line each; empty when valid."""
    try:
        resolve_settings(load_config_file(path), {})
    except InvalidConfig as exc:
        return exc.lines()
    return []
