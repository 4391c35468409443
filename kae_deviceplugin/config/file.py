"""The versioned YAML configuration file: its keys, the rule for every value, and its loading.

Every problem is collected before failing, so one ``check-config`` run shows them all, and a file
yields either a complete validated overlay or an error: nothing is half-applied. The value rules
are shared with command-line and environment overrides so that both are judged alike.
"""

from __future__ import annotations

import ipaddress
import math
import re
import reprlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from kae_deviceplugin.core.engines import ENGINES_BY_NAME
from kae_deviceplugin.errors import KaeDevicePluginError

VERSION: Final = "v1"
MAX_FILE_BYTES: Final = 1 << 20
MAX_SHARES: Final = 64
MAX_SCAN_INTERVAL: Final = 3600.0


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Final = _Missing()  # the value of a ConfigError about a key that is absent or unknown
_REPR = reprlib.Repr()  # user values can be huge or deeply nested: show only their start
_REPR.maxstring = _REPR.maxother = 60


@dataclass(frozen=True, slots=True)
class ConfigError:
    """One problem: where (``engines.hpre.shares`` or a flag name), the offending value, and why."""

    path: str
    value: object
    why: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        got = "" if self.value is MISSING else f" (got {show(self.value)})"
        return f"{where}{self.why}{got}"


def show(value: object) -> str:
    """A short repr of a user's value: its start only, and never an exception."""
    try:
        return _REPR.repr(value)
    except ValueError:  # an int too long for str() (Python caps it at 4300 digits)
        return f"<{type(value).__name__} too long to show>"


class InvalidConfig(KaeDevicePluginError):
    """Every problem found in one file or one set of overrides, one per line."""

    def __init__(self, errors: Iterable[ConfigError], source: str | None = None) -> None:
        self.errors: tuple[ConfigError, ...] = tuple(errors)
        self.source = source
        super().__init__("\n".join(self.lines()))

    @classmethod
    def whole(cls, source: str, why: str) -> InvalidConfig:
        """A problem with the file as a whole rather than with one of its keys."""
        return cls([ConfigError("", MISSING, why)], source)

    def lines(self) -> list[str]:
        prefix = f"{self.source}: " if self.source else ""
        return [f"{prefix}{error}" for error in self.errors]


@dataclass(frozen=True, slots=True)
class FileConfig:
    """The settings one file names, validated and typed, keyed by ``Settings`` field names."""

    source: str
    settings: Mapping[str, object]
    engines: Mapping[str, Mapping[str, object]]
    env: Mapping[str, object]


# A rule turns a raw value into its typed form or raises ValueError saying why it cannot.
Rule = Callable[[object], Any]

_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_UNITS["µs"] = _UNITS["μs"] = 1e-6  # Go accepts both micro signs
_UNIT = "|".join(sorted(_UNITS, key=len, reverse=True))  # longest first: "ms" before "m"
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_DURATION_PART = re.compile(rf"({_NUMBER})({_UNIT})")
_DURATION = re.compile(rf"([+-]?)((?:{_NUMBER}(?:{_UNIT}))+|{_NUMBER})")
_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?:\.(?!-)[A-Za-z0-9-]{1,63})*\.?")
_DURATION_WHY = "must be a number of seconds or a duration such as 500ms, 1s, 2m"


def parse_duration(value: object) -> float:
    """Seconds from a number of seconds or a Go-style duration string (``500ms``, ``1m30s``)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(_DURATION_WHY)
    if isinstance(value, int):  # float() of a huge int overflows; such a value is out of range
        return float(value) if abs(value) < 10**15 else (math.inf if value > 0 else -math.inf)
    if isinstance(value, float):
        if math.isnan(value):
            raise ValueError("must be a number, not NaN")
        return value
    match = _DURATION.fullmatch(value.strip())
    if match is None:
        raise ValueError(_DURATION_WHY)
    parts = _DURATION_PART.findall(match[2]) or [(match[2], "s")]
    seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    return -seconds if match[1] == "-" else seconds


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate a typo most likely meant, ignoring case, ``_`` and ``-``; None if none."""

    def squash(text: str) -> str:
        return text.lower().replace("_", "").replace("-", "")

    by_squashed = {squash(candidate): candidate for candidate in candidates}
    import difflib  # noqa: PLC0415 -- only a mistyped key needs it: not loaded at rest

    close = difflib.get_close_matches(squash(word), list(by_squashed), n=1, cutoff=0.6)
    return by_squashed[close[0]] if close else None


def _boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    # Environment variables arrive as strings; YAML itself already turns yes/no/on/off into bools.
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        raise ValueError("must be true or false")
    return text in ("true", "yes", "on", "1")


def _shares(value: object) -> int:
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]{1,18}\s*", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SHARES:
        raise ValueError(f"must be a whole number from 1 to {MAX_SHARES}")
    return value


def _choice(*choices: str) -> Rule:
    def rule(value: object) -> str:
        if isinstance(value, str) and value.strip().lower() in choices:
            return value.strip().lower()
        why = "must be one of " + ", ".join(choices)
        guess = did_you_mean(value, choices) if isinstance(value, str) else None
        raise ValueError(f"{why}; did you mean {guess!r}?" if guess else why)

    return rule


def _path_text(value: object) -> str:
    if not isinstance(value, str | Path) or not str(value).startswith("/"):
        raise ValueError("must be an absolute path")
    if "\0" in str(value):
        raise ValueError("must not contain a NUL character")
    return str(value)


def _path(value: object) -> Path:
    return Path(_path_text(value))


def _optional(rule: Rule) -> Rule:
    """Null or an empty string means "not set": use the derived default, or disable the feature."""
    return lambda value: None if value is None or value == "" else rule(value)


def _scan_interval(value: object) -> float:
    seconds = parse_duration(value)
    if not 0 < seconds <= MAX_SCAN_INTERVAL:
        raise ValueError("must be more than 0s and at most 1h")
    return seconds


def _metrics_address(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError('must be a string such as ":9410" (quote it in YAML), or "" to disable')
    if not value.strip():
        return ""
    host, colon, port = value.strip().rpartition(":")
    if not colon or not re.fullmatch(r"[0-9]{1,5}", port) or not 1 <= int(port) <= 65535:
        raise ValueError("must be host:port or :port, with a port from 1 to 65535")
    if host.startswith("["):
        if not host.endswith("]") or not _is_ip(host[1:-1], ipaddress.IPv6Address):
            raise ValueError("a host in brackets must be an IPv6 address, such as [::]:9410")
    elif ":" in host:
        raise ValueError("an IPv6 host must be in brackets, such as [::]:9410")
    elif re.fullmatch(r"[0-9.]+", host) and not _is_ip(host, ipaddress.IPv4Address):
        raise ValueError("the host is not a valid IPv4 address")
    elif host and not _HOSTNAME.fullmatch(host):
        raise ValueError("the host must be a hostname or an IP address")
    return value.strip()


def _is_ip(text: str, kind: Callable[[str], object]) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True


# Every Settings field the file can set: (section, key as written, field name, rule).
_FIELDS: Final = (
    ("", "scanInterval", "scan_interval", _scan_interval),
    ("", "registration", "registration", _choice("auto", "kubelet-socket", "plugin-watcher")),
    ("", "allocationPolicy", "allocation_policy", _choice("balanced", "packed")),
    ("", "containerSysfsView", "container_sysfs_view", _boolean),
    ("", "cdi", "cdi", _boolean),
    ("", "metricsAddress", "metrics_address", _metrics_address),
    ("log", "level", "log_level", _choice("debug", "info", "warning", "error")),
    ("log", "format", "log_format", _choice("text", "json")),
    ("paths", "sysfsRoot", "sysfs_root", _path),
    ("paths", "devRoot", "dev_root", _path),
    ("paths", "kubeletRoot", "kubelet_root", _path),
    ("paths", "devicePluginDir", "device_plugin_dir", _optional(_path)),
    ("paths", "podResourcesSocket", "pod_resources_socket", _optional(_path)),
    ("paths", "stateDir", "state_dir", _path),
    ("paths", "nfdFeaturesFile", "nfd_features_file", _optional(_path)),
    ("paths", "cdiDir", "cdi_dir", _path),
)
SETTING_RULES: Final[Mapping[str, Rule]] = {name: rule for _, _, name, rule in _FIELDS}
ENGINE_RULES: Final[Mapping[str, Rule]] = {
    "enabled": _boolean,
    "shares": _shares,
    "functions": _choice("all", "pf", "vf", "prefer-vf"),
}
ENV_RULES: Final[Mapping[str, Rule]] = {
    "uadk_numa_hint": _boolean,
    "openssl_engines": _optional(_path_text),
}
ENV_KEYS: Final = {"uadkNumaHint": "uadk_numa_hint", "opensslEngines": "openssl_engines"}
_KEYS: dict[str, dict[str, str]] = {}  # section -> {key as written: field name}
for _section, _key, _name, _ in _FIELDS:
    _KEYS.setdefault(_section, {})[_key] = _name
_TOP_LEVEL = {k: k for k in ["version", *_KEYS[""], "log", "paths", "engines", "env"]}
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


def read_engines(value: object, path: str, errors: list[ConfigError]) -> dict[str, Any]:
    """Validate ``{engine name: {field: value}}`` against the engine table, in document order."""
    keys = {key: key for key in ENGINE_RULES}

    def engine_rule(name: str) -> Rule:
        return lambda item: MappingProxyType(
            read_section(item, keys, ENGINE_RULES, join(path, name), errors)
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
            settings |= read_section({key: item}, _KEYS[""], SETTING_RULES, "", errors)
        elif key in ("log", "paths"):
            settings |= read_section(item, _KEYS[key], SETTING_RULES, key, errors)
        elif key == "engines":
            engines = read_engines(item, key, errors)
        elif key == "env":
            env = read_section(item, ENV_KEYS, ENV_RULES, key, errors)
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
