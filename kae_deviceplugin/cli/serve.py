"""`kae-deviceplugin serve`: its options, made from the settings table, and how they override.

Every option comes from a row of :data:`kae_deviceplugin.config.schema.OPTIONS`: its flag, its
``KAE_DP_*`` variable, its help and the default shown in ``--help``. Options default to "not
given", so that only what was written on the command line or in the environment overrides the
file: flags > env > file > defaults. Values go to the settings' own rules as written, so a flag and
a file key accept the same spellings (``on``/``true``/``1``, choices in any case).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.config.resolve import (
    check_node_name_variable,
    enable_only,
    parse_engine_list,
    resolve_settings,
    where_set,
)
from kae_deviceplugin.config.schema import (
    ENABLE_ENGINES_FLAG,
    ENV_PREFIX,
    OPTIONS,
    OPTIONS_BY_FIELD,
    Option,
)
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.errors import InvalidConfig

F = TypeVar("F", bound=Callable[..., Any])
_ENGINES_PARAM = "enable_engines"


def _metavar(option: Option) -> str:
    if option.choices:
        return "|".join(option.choices)
    return {
        "duration": "DURATION",
        "boolean": "on|off",
        "address": "HOST:PORT",
        "path": "PATH",
        "optional-path": "PATH",
        "optional-name": "NAME",
        "engine-list": "ENGINES",
    }.get(option.kind, "VALUE")


def _click_option(option: Option) -> Callable[[F], F]:
    return click.option(
        option.flag,
        option.name if "." in option.field else option.field,
        default=None,
        metavar=_metavar(option),
        envvar=option.env_var,
        show_envvar=True,
        help=f"{option.help}  [default: {option.default_text()}]",
    )


def setting_option(field: str) -> Callable[[F], F]:
    """serve's option for one setting, for another command that resolves settings as serve does."""
    return _click_option(OPTIONS_BY_FIELD[field])


def serve_options(func: F) -> F:
    """Decorate ``func`` with --config, every row of the settings table and --enable-engines."""
    func = click.option(
        ENABLE_ENGINES_FLAG,
        _ENGINES_PARAM,
        default=None,
        metavar="hpre,sec,...",
        envvar=ENV_PREFIX + _ENGINES_PARAM.upper(),
        show_envvar=True,
        help="Serve exactly these engines (commas or spaces); the others are disabled.  "
        "[default: every engine]",
    )(func)
    for option in reversed(OPTIONS):
        func = _click_option(option)(func)
    return config_option(func)


config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="YAML configuration file (version: v1); serve reloads it on change and on SIGHUP.",
)


def _as_given(option: Option, value: object) -> object:
    """Command-line paths may be relative to the working directory; settings hold absolute ones."""
    if option.kind in ("path", "optional-path") and isinstance(value, str) and value:
        return str(Path(value).absolute())
    return value


def overrides_from(
    ctx: click.Context, params: dict[str, Any]
) -> tuple[dict[str, object], dict[str, str]]:
    """The options given on the command line or in the environment, and how to name each."""
    given: dict[str, object] = {}
    sources: dict[str, str] = {}
    by_param = {(o.name if "." in o.field else o.field): o for o in OPTIONS}
    for name, value in params.items():
        source = ctx.get_parameter_source(name)
        if source not in (
            click.core.ParameterSource.COMMANDLINE,
            click.core.ParameterSource.ENVIRONMENT,
        ):
            continue
        from_env = source is click.core.ParameterSource.ENVIRONMENT
        if name == _ENGINES_PARAM:
            label = ENV_PREFIX + name.upper() if from_env else ENABLE_ENGINES_FLAG
            given["engines"] = enable_only(parse_engine_list(value, label=label))
            sources["engines"] = label
            continue
        option = by_param[name]
        given[option.field] = _as_given(option, value)
        sources[option.field] = option.env_var if from_env else option.flag
    _empty_variables(by_param, ctx, given, sources)
    return given, sources


# Settings whose empty value means something ("" turns the metrics endpoint or the NFD file
# off), which click takes for an unset variable: an empty one is given here.
_EMPTY_MEANS_OFF = ("metrics_address", "nfd_features_file")


def _empty_variables(
    by_param: dict[str, Option],
    ctx: click.Context,
    given: dict[str, object],
    sources: dict[str, str],
) -> None:
    for name in _EMPTY_MEANS_OFF:
        option = by_param[name]
        default = ctx.get_parameter_source(name) is click.core.ParameterSource.DEFAULT
        if default and os.environ.get(option.env_var) == "":
            given[option.field], sources[option.field] = "", option.env_var


def load_settings(
    config_path: Path | None, overrides: dict[str, object], sources: dict[str, str]
) -> tuple[Settings, ConfigSource | None]:
    """Settings for serve; raises InvalidConfig listing every problem of flags, env and file."""
    if config_path is None:
        return resolve_settings(None, overrides, sources=sources), None
    source = ConfigSource(config_path, overrides, sources)
    return source.initial(), source


def label_for(
    ctx: click.Context, params: dict[str, Any], source: ConfigSource | None
) -> Callable[[str], str]:
    """How the user wrote each setting, for a refusal: its flag or KAE_DP_* variable, else the
    file's key where the file set it, else the flag (``config.resolve.where_set``)."""
    if source is not None:
        return source.label
    _given, sources = overrides_from(ctx, params)
    return functools.partial(where_set, sources=sources, file=None)


def settings_or_exit(
    ctx: click.Context, config_path: Path | None, params: dict[str, Any]
) -> tuple[Settings, ConfigSource | None]:
    """The settings these flags, variables and file make; exit 2 listing every bad value (the
    same refusal for serve and doctor)."""
    try:
        overrides, sources = overrides_from(ctx, params)
        settings, source = load_settings(config_path, overrides, sources)
        check_node_name_variable(settings, os.environ)  # DRA's fallback, judged as the flag
        return settings, source
    except InvalidConfig as err:
        for line in err.lines():
            click.echo(f"error: {line}", err=True)
        raise SystemExit(2) from err
