"""The reference table of docs/configuration.md, rendered from the settings table (a test keeps
the document current; scripts/render-config-reference.py rewrites it)."""

from __future__ import annotations

from kae_deviceplugin.config.schema import (
    ENABLE_ENGINES_FLAG,
    ENGINE_FIELDS,
    ENV_PREFIX,
    OPTIONS,
    RELOAD_TEXT,
    Option,
    show_value,
)
from kae_deviceplugin.config.settings import EngineSettings


def _type_text(option: Option) -> str:
    if option.choices:
        return ", ".join(f"`{c}`" for c in option.choices)
    return {
        "duration": "seconds or duration, > 0 and <= 1h",
        "boolean": "boolean",
        "address": '`host:port`, `:port`, `[v6]:port`, `""`',
        "path": "absolute path",
        "optional-path": "absolute path or null",
        "optional-name": "node name or null",
        "engine-list": "engine list (`zip`, `hpre,sec` or a YAML list)",
    }[option.kind]


def render_reference() -> str:
    """The reference table of docs/configuration.md, generated from the table above."""
    lines = [
        "| file key | flag and variable | type | default | reload | what it does |",
        "|---|---|---|---|---|---|",
        "| `version` | none | `v1` | required | n/a | The file format's version. |",
    ]
    for option in OPTIONS:
        lines.append(
            f"| `{option.key}` | `{option.flag}`, `{option.env_var}` | {_type_text(option)} | "
            f"`{option.default_text()}` | {RELOAD_TEXT[option.reload]} | {option.help} |"
        )
    defaults = EngineSettings()
    for name, (_, type_text) in ENGINE_FIELDS.items():
        value = getattr(defaults, name)
        default = "null" if value is None else show_value(value, "count")
        lines.append(
            f"| `engines.<name>.{name}` | none | {type_text} | `{default}` | "
            f"{RELOAD_TEXT['resource']} | See below. |"
        )
    lines.append(
        f"| none | `{ENABLE_ENGINES_FLAG}`, `{ENV_PREFIX}ENABLE_ENGINES` | engine list | all | "
        "n/a | Enable exactly the listed engines (`hpre,sec`) and disable the others. |"
    )
    return "\n".join(lines) + "\n"
