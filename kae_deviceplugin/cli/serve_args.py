"""serve's settings from what was given (flags and KAE_DP_* variables), and serve's command line
read without click when it holds nothing but serve's own long options.

click costs the long-lived daemon about 1.4 MiB resident (itself and the stdlib it loads: uuid,
platform, datetime, gettext, locale) for a command line read once. :func:`read` takes the command
lines a DaemonSet writes (``serve``, then ``--flag value`` or ``--flag=value`` of serve's options,
each at most once) and leaves every other (help, a typo, a missing value, a value starting with
``-``, a ``--config`` click's path check refuses) to click, whose messages stay the only ones.
Both readers hand what was given to :func:`overrides_of`, so they cannot differ in the settings;
tests/cli/test_serve_args.py holds them equal over generated command lines.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.config.resolve import (
    check_node_name_variable,
    enable_only,
    parse_engine_list,
    resolve_settings,
    where_set,
)
from kae_deviceplugin.config.rules import did_you_mean
from kae_deviceplugin.config.schema import ENABLE_ENGINES_FLAG, ENV_PREFIX, OPTIONS, Option
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.errors import InvalidConfig

PROG = "kae-deviceplugin"
ENGINES_PARAM = "enable_engines"
CONFIG_PARAM = "config_path"
# A value each parameter was given and whether it came from its variable (else the command line).
Given = Mapping[str, tuple[str, bool]]


def param_name(option: Option) -> str:
    """The click parameter (and keyword) name of a settings row."""
    return option.name if "." in option.field else option.field


PARAMS = {param_name(o): o for o in OPTIONS}
FLAGS = {o.flag: param_name(o) for o in OPTIONS} | {
    ENABLE_ENGINES_FLAG: ENGINES_PARAM,
    "--config": CONFIG_PARAM,
}
# Settings whose empty value means something ("" turns the metrics endpoint or the NFD file off),
# which click takes for an unset variable: an empty one is given here.
EMPTY_MEANS_OFF = ("metrics_address", "nfd_features_file")
# The variables of the other commands' options (cli.options.option names each after its flag);
# tests/cli/test_serve_args.py checks this against every command click has.
OTHER_VARIABLES = ("ALLOCATIONS", "ENDPOINT", "OUTPUT", "SERVE", "TREE")
VARIABLES = {param_name(o): o.env_var for o in OPTIONS} | {
    ENGINES_PARAM: ENV_PREFIX + ENGINES_PARAM.upper()
}
KNOWN_VARIABLES = frozenset(VARIABLES.values()) | {ENV_PREFIX + n for n in OTHER_VARIABLES}


class Resolved(NamedTuple):
    settings: Settings
    source: ConfigSource | None  # the config file, reloaded on change
    label: Callable[[str], str]  # how the user wrote each setting, for a refusal


@dataclass(frozen=True)
class ServeCall:
    """A `serve` command line as click would read it."""

    config_path: Path | None
    given: dict[str, tuple[str, bool]]


def overrides_of(
    given: Given, environ: Mapping[str, str]
) -> tuple[dict[str, object], dict[str, str]]:
    """The settings given on the command line or in the environment, and how to name each."""
    overrides: dict[str, object] = {}
    sources: dict[str, str] = {}
    for name, (value, from_env) in given.items():
        if name == ENGINES_PARAM:
            label = ENV_PREFIX + name.upper() if from_env else ENABLE_ENGINES_FLAG
            overrides["engines"] = enable_only(parse_engine_list(value, label=label))
            sources["engines"] = label
            continue
        option = PARAMS[name]
        overrides[option.field] = _as_given(option, value)
        sources[option.field] = option.env_var if from_env else option.flag
    for name in EMPTY_MEANS_OFF:
        option = PARAMS[name]
        if name not in given and environ.get(option.env_var) == "":
            overrides[option.field], sources[option.field] = "", option.env_var
    return overrides, sources


def _as_given(option: Option, value: str) -> str:
    """Command-line paths may be relative to the working directory; settings hold absolute ones."""
    if option.kind in ("path", "optional-path") and value:
        return str(Path(value).absolute())
    return value


def load(config_path: Path | None, given: Given, environ: Mapping[str, str]) -> Resolved:
    """The settings these flags, variables and file make; InvalidConfig listing every problem."""
    overrides, sources = overrides_of(given, environ)
    if config_path is None:
        settings = resolve_settings(None, overrides, sources=sources)
        resolved = Resolved(
            settings, None, functools.partial(where_set, sources=sources, file=None)
        )
    else:
        source = ConfigSource(config_path, overrides, sources)
        resolved = Resolved(source.initial(), source, source.label)
    check_node_name_variable(resolved.settings, environ)  # DRA's fallback, judged as the flag
    return resolved


def settings_or_exit(
    config_path: Path | None, given: Given, environ: Mapping[str, str]
) -> Resolved:
    """``load``, or exit 2 listing every bad value (the same refusal for serve and doctor)."""
    try:
        return load(config_path, given, environ)
    except InvalidConfig as err:
        for line in err.lines():
            print(f"error: {line}", file=sys.stderr, flush=True)
        raise SystemExit(2) from err


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A warning for each KAE_DP_* variable no option reads (a typo is ignored, not applied)."""
    lines = []
    known = [k[len(ENV_PREFIX) :] for k in sorted(KNOWN_VARIABLES)]
    for name in sorted(n for n in environ if n.startswith(ENV_PREFIX) and n not in KNOWN_VARIABLES):
        guess = did_you_mean(name.removeprefix(ENV_PREFIX), known)
        hint = f"; did you mean {ENV_PREFIX}{guess}?" if guess else ""
        lines.append(f"warning: {name} is not a kae-deviceplugin variable, so it is ignored{hint}")
    return lines


def read(argv: Sequence[str], environ: Mapping[str, str]) -> ServeCall | None:
    """``argv`` (without the program) as click reads a plain `serve` command line, or None when
    click must read it: anything else, or anything click might refuse."""
    if not argv or argv[0] != "serve" or f"_{PROG.upper().replace('-', '_')}_COMPLETE" in environ:
        return None
    given: dict[str, tuple[str, bool]] = {}
    rest = list(argv[1:])
    while rest:
        flag, equals, value = rest.pop(0).partition("=")
        name = FLAGS.get(flag)
        if name is None or name in given:
            return None  # not serve's (help, a typo, a positional) or given twice
        if not equals:
            if not rest or rest[0].startswith("-"):
                return None  # a missing value, or one click might take for an option
            value = rest.pop(0)
        given[name] = (value, False)
    config = given.pop(CONFIG_PARAM, None)
    if config is not None and not _a_path_click_takes(config[0]):
        return None
    for name, variable in VARIABLES.items():
        if name not in given and environ.get(variable):  # click: an empty variable is unset
            given[name] = (environ[variable], True)
    return ServeCall(Path(config[0]) if config else None, given)


def _a_path_click_takes(value: str) -> bool:
    """What click.Path(dir_okay=False) accepts without a word: a path that is not there yet,
    or a readable one that is no directory."""
    if not value:
        return False
    if not os.path.exists(value):
        return True
    return not os.path.isdir(value) and os.access(value, os.R_OK)
