"""How a setting's value is written and what a reload does with it: the vocabulary of the
settings table (:mod:`kae_deviceplugin.config.schema`), kept apart so the table stays one page."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Final, Literal

# What a running daemon does when a reloaded file changes the setting.
Reload = Literal["applied", "republished", "resource", "restart"]
RELOAD_TEXT: Final[dict[Reload, str]] = {
    "applied": "applied",
    "republished": "applied, all resources republished",
    "resource": "applied to that resource",
    "restart": "restart",
}
# How a value is written, for flags (what to make absolute) and for the reference.
Kind = Literal[
    "duration",
    "choice",
    "boolean",
    "address",
    "path",
    "optional-path",
    "count",
    "optional-name",
    "engine-list",
    "vf-count",
]


def show_value(value: object, kind: Kind) -> str:
    """A value as a user would write it in a flag or the file."""
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if kind == "duration" and isinstance(value, float):
        if value >= 1 and math.isclose(value, round(value)):
            return f"{round(value)}s"
        return f"{round(value * 1000)}ms"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, frozenset):  # an engine list, as its rule reads it back
        value = ",".join(sorted(value))
    return str(value) if value != "" else '""'
