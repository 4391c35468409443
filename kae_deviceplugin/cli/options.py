"""Options shared by the one-off commands (`list`, `doctor`): built once, so both spell them alike.

Each long option reads the ``KAE_DP_*`` variable of its name, as serve's do; the roots and the
kubelet root take serve's settings-table row (its help and default), so ``--kubelet-root`` means
the same thing to every command.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kae_deviceplugin.config.schema import ENV_PREFIX, OPTIONS_BY_FIELD, default_of
from kae_deviceplugin.config.settings import MODES

F = TypeVar("F", bound=Callable[..., Any])


class BadInvocation(click.ClickException):
    """A bad option value: one "Error: ..." line and exit code 2, as for click's usage errors."""

    exit_code = 2


def option(*decls: str, **attrs: Any) -> Callable[[F], F]:
    """A click option whose environment variable is KAE_DP_<LONG NAME IN UPPER SNAKE>."""
    long_name = next(d for d in decls if d.startswith("--"))
    attrs.setdefault("envvar", ENV_PREFIX + long_name[2:].replace("-", "_").upper())
    attrs.setdefault("show_envvar", True)
    return click.option(*decls, **attrs)


def _root_option(field: str) -> Callable[[F], F]:
    """--sysfs-root or --dev-root for the one-off commands: serve's row, with its default."""
    row = OPTIONS_BY_FIELD[field]
    return option(
        row.flag,
        type=click.Path(path_type=Path, file_okay=False),
        default=default_of(field),
        show_default=True,
        help=row.help,
    )


sysfs_root_option = _root_option("sysfs_root")
dev_root_option = _root_option("dev_root")
kubelet_root_option = option(
    "--kubelet-root",
    type=click.Path(path_type=Path),
    default=default_of("kubelet_root"),
    show_default=True,
    help="The kubelet's root directory (device-plugins/, plugins_registry/, plugins/).",
)
output_option = option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people; json is a stable interface for scripts.",
)
# `list`'s mode: a plain choice, as `list` reads no configuration file (doctor takes serve's).
list_mode_option = option(
    "--mode",
    type=click.Choice(MODES, case_sensitive=False),
    default=MODES[0],
    show_default=True,
    help="dra also shows each device's DRA device name and the claim holding it (read from "
    "the driver's checkpoint under --kubelet-root); auto: the mode the daemon chose at its "
    "start (recorded in $KAE_DP_STATE_DIR, else the default state directory).",
)
