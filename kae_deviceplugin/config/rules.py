"""The rule for every kind of setting value: durations, booleans, choices, paths, addresses.

A rule turns a raw value (from YAML, a flag or a ``KAE_DP_*`` variable) into its typed form or
raises ValueError saying why it cannot. The same rules judge every source, so a bad value fails
alike wherever it was written.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from kae_deviceplugin.core.engines import ENGINES_BY_NAME, MAX_VFS
from kae_deviceplugin.core.ids import MAX_SHARES

Rule = Callable[[object], Any]

MAX_SCAN_INTERVAL: Final = 3600.0

_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_UNITS["µs"] = _UNITS["μs"] = 1e-6  # Go accepts both micro signs
_UNIT = "|".join(sorted(_UNITS, key=len, reverse=True))  # longest first: "ms" before "m"
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_DURATION_PART = re.compile(rf"({_NUMBER})({_UNIT})")
_DURATION = re.compile(rf"([+-]?)((?:{_NUMBER}(?:{_UNIT}))+|{_NUMBER})")
_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?:\.(?!-)[A-Za-z0-9-]{1,63})*\.?")
_DURATION_WHY = "must be a number of seconds or a duration such as 500ms, 1s, 2m"
SCAN_INTERVAL_WHY: Final = "must be more than 0s and at most 1h"
# The spellings above, for the chart's value rules (scripts/chart_tooling/chart_rules.py):
# one grammar for both.
UNITS: Final = MappingProxyType(_UNITS)
NUMBER_PATTERN: Final = _NUMBER
DURATION_PATTERN: Final = _DURATION.pattern
TRUE_WORDS: Final = ("true", "yes", "on", "1")
FALSE_WORDS: Final = ("false", "no", "off", "0")


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


def boolean(value: object) -> bool:
    """YAML booleans, or (from flags and the environment) true/yes/on/1, false/no/off/0."""
    if isinstance(value, bool):
        return value
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in (*TRUE_WORDS, *FALSE_WORDS):
        raise ValueError("must be true or false")
    return text in TRUE_WORDS


def unquoted(rule: Rule) -> Rule:
    """``rule`` for a key of the configuration file whose YAML type says what it is (a boolean,
    a count): text there is a quoted value, which the file refuses rather than guess at.

    Flags and variables are text by nature and keep ``rule``'s spellings (``on``, ``"4"``).
    """

    def file_rule(value: object) -> object:
        if isinstance(value, str):
            try:
                rule(None)
            except ValueError as err:  # the rule's own sentence: "must be true or false"
                raise ValueError(
                    f"{err}, written without quotes (a YAML value, not text)"
                ) from None
        return rule(value)

    return file_rule


SHARES_TEXT_PATTERN: Final = r"\s*[+-]?[0-9]{1,18}\s*"  # a count written as text (flags, env)


def shares(value: object) -> int:
    """How many containers may hold one device: a whole number from 1 to MAX_SHARES."""
    if isinstance(value, str) and re.fullmatch(SHARES_TEXT_PATTERN, value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SHARES:
        raise ValueError(f"must be a whole number from 1 to {MAX_SHARES}")
    return value


VF_COUNT_WHY: Final = (
    f"must be a whole number from 0 to {MAX_VFS}, or max, written without quotes; "
    "null leaves the VFs as they are"
)


def vf_count(value: object) -> int | str | None:
    """A VF profile: a YAML integer 0 to MAX_VFS, ``max`` (any case), or null for "unset"."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() == "max":
        return "max"
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_VFS:
        raise ValueError(VF_COUNT_WHY)
    return value


def choice(choices: tuple[str, ...]) -> Rule:
    """One of ``choices``, written in any case, as the table spells it; a typo gets a
    suggestion."""
    spelled = {c.lower(): c for c in choices}  # "noschedule" is NoSchedule, the API's spelling

    def rule(value: object) -> str:
        if isinstance(value, str) and value.strip().lower() in spelled:
            return spelled[value.strip().lower()]
        why = "must be one of " + ", ".join(choices)
        guess = did_you_mean(value, choices) if isinstance(value, str) else None
        raise ValueError(f"{why}; did you mean {guess!r}?" if guess else why)

    return rule


def engine_list(value: object) -> frozenset[str]:
    """Engine names: a YAML list, or text with commas or spaces (``zip,sec``); empty is none."""
    if isinstance(value, str):
        words = value.replace(",", " ").split()
    elif isinstance(value, list | tuple | frozenset | set) and all(
        isinstance(v, str) for v in value
    ):
        words = [w for v in value for w in v.replace(",", " ").split()]
    else:
        raise ValueError("must be a list of engine names, or names separated by commas")
    names = frozenset(w.lower() for w in words)
    for name in sorted(names - set(ENGINES_BY_NAME)):
        guess = did_you_mean(name, ENGINES_BY_NAME)
        hint = f"; did you mean {guess!r}?" if guess else "; known: " + ", ".join(ENGINES_BY_NAME)
        raise ValueError(f"{name!r} is not an engine{hint}")
    return names


def path_text(value: object) -> str:
    """An absolute path, as text."""
    if not isinstance(value, str | Path) or not str(value).startswith("/"):
        raise ValueError("must be an absolute path")
    if "\0" in str(value):
        raise ValueError("must not contain a NUL character")
    return str(value)


def path(value: object) -> Path:
    """An absolute path."""
    return Path(path_text(value))


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def node_name(value: object) -> str:
    """A Kubernetes node name: a DNS subdomain (lower case, at most 253 characters)."""
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError("must be a node name (lower-case DNS subdomain, at most 253 characters)")
    return value


def optional(rule: Rule) -> Rule:
    """Null or an empty string means "not set": use the derived default, or disable the feature."""
    return lambda value: None if value is None or value == "" else rule(value)


def scan_interval(value: object) -> float:
    """A duration above 0 and at most an hour."""
    seconds = parse_duration(value)
    if not 0 < seconds <= MAX_SCAN_INTERVAL:
        raise ValueError(SCAN_INTERVAL_WHY)
    return seconds


def _address_parts(text: str) -> tuple[str, int] | str:
    """(host, port) of an address, or why it is not one."""
    host, colon, port = text.rpartition(":")
    if not colon or not re.fullmatch(r"[0-9]{1,5}", port) or int(port) > 65535:
        return "must be host:port or :port, with a port from 1 to 65535"
    if host.startswith("["):
        if not host.endswith("]") or not _is_ip(host[1:-1], ipaddress.IPv6Address):
            return "a host in brackets must be an IPv6 address, such as [::]:9410"
        host = host[1:-1]
    elif ":" in host:
        return "an IPv6 host must be in brackets, such as [::]:9410"
    elif re.fullmatch(r"[0-9.]+", host) and not _is_ip(host, ipaddress.IPv4Address):
        return "the host is not a valid IPv4 address"
    elif host and not _HOSTNAME.fullmatch(host):
        return "the host must be a hostname or an IP address"
    return host, int(port)


def parse_address(text: str) -> tuple[str, int]:
    """Host and port of ``:9410``, ``0.0.0.0:9410``, ``[::]:9410`` or ``host:9410``.

    An empty host means every interface; port 0 (any free port) is accepted here, for tests and
    embedders, but not by the ``metricsAddress`` rule.
    """
    parts = _address_parts(text)
    if isinstance(parts, str):
        raise ValueError(f"{text!r}: {parts}")
    return parts


def metrics_address(value: object) -> str:
    """Where the HTTP endpoint listens: host:port, :port, [v6]:port, or "" to disable it."""
    if not isinstance(value, str):
        raise ValueError('must be a string such as ":9410" (quote it in YAML), or "" to disable')
    text = value.strip()
    if not text:
        return ""
    parts = _address_parts(text)
    if isinstance(parts, str):
        raise ValueError(parts)
    if parts[1] == 0:
        raise ValueError("must be host:port or :port, with a port from 1 to 65535")
    return text


def _is_ip(text: str, kind: Callable[[str], object]) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True
