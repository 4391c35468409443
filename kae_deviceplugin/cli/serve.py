"""`kae-deviceplugin serve`: its options, made from the settings table, and how they override.

Every option comes from a row of :data:`kae_deviceplugin.config.schema.OPTIONS`: its flag, its
``KAE_DP_*`` variable, its help and the default shown in ``--help``. Options default to "not
given", so that only what was written on the command line or in the environment overrides the
file: flags > env > file > defaults. Values go to the settings' own rules as written, so a flag and
a file key accept the same spellings (``on``/``true``/``1``, choices in any case). What was given
becomes settings in :mod:`kae_deviceplugin.cli.serve_args`, which also reads serve's usual
command line without click.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from kae_deviceplugin.cli import serve_args
from kae_deviceplugin.cli.serve_args import (
    CONFIG_PARAM,
    ENGINES_PARAM,
    VARIABLES,
    Resolved,
    param_name,
)
from kae_deviceplugin.config.schema import (
    ENABLE_ENGINES_FLAG,
    OPTIONS,
    OPTIONS_BY_FIELD,
    Option,
)

F = TypeVar("F", bound=Callable[..., Any])


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
        param_name(option),
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
        ENGINES_PARAM,
        default=None,
        metavar="hpre,sec,...",
        envvar=VARIABLES[ENGINES_PARAM],
        show_envvar=True,
        help="Serve exactly these engines (commas or spaces); the others are disabled.  "
        "[default: every engine]",
    )(func)
    for option in reversed(OPTIONS):
        func = _click_option(option)(func)
    return config_option(func)


config_option = click.option(
    "--config",
    CONFIG_PARAM,
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="YAML configuration file (version: v1); serve reloads it on change and on SIGHUP.",
)


def given_from(ctx: click.Context, params: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """What click read from the command line or the environment (not defaults), as
    ``serve_args.overrides_of`` takes it."""
    given: dict[str, tuple[str, bool]] = {}
    for name, value in params.items():
        source = ctx.get_parameter_source(name)
        if source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            given[name] = (value, source is ParameterSource.ENVIRONMENT)
    return given


def settings_or_exit(
    ctx: click.Context, config_path: Path | None, params: Mapping[str, Any]
) -> Resolved:
    """serve_args.settings_or_exit over what click read."""
    return serve_args.settings_or_exit(config_path, given_from(ctx, params), os.environ)
