"""One row of the settings table (:mod:`kae_deviceplugin.config.schema`): the ``Option`` record,
how a row is made from its kind, and each setting's default. Apart from the table, so the table
stays a page of rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kae_deviceplugin.config import rules
from kae_deviceplugin.config.kinds import Kind, Reload, show_value
from kae_deviceplugin.config.settings import Settings

ENV_PREFIX: Final = "KAE_DP_"


@dataclass(frozen=True, slots=True)
class Option:
    """One setting: where it lives in ``Settings`` and how each source spells it."""

    field: str  # attribute of Settings, or "env.<attribute of EnvSettings>"
    key: str  # the file key path: scanInterval, log.level, env.uadkNumaHint
    rule: rules.Rule
    kind: Kind
    help: str
    reload: Reload
    choices: tuple[str, ...] = ()
    derived_default: str | None = None  # how to show a default that follows another setting

    @property
    def name(self) -> str:
        """The last part of the field: the flag and variable names are made from it."""
        return self.field.rpartition(".")[2]

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def section(self) -> str:
        """The file section the key sits in ("" for the top level)."""
        return self.key.rpartition(".")[0]

    @property
    def file_key(self) -> str:
        return self.key.rpartition(".")[2]

    def default_text(self) -> str:
        """The default as a user writes it."""
        if self.derived_default is not None:
            return self.derived_default
        return show_value(default_of(self.field), self.kind)


def option(
    field: str,
    key: str,
    kind: Kind,
    help: str,
    reload: Reload,
    *,
    rule: rules.Rule | None = None,
    **extra: str | tuple[str, ...],
) -> Option:
    """A row of the table: the rule follows from ``kind`` unless given (a choice's from its
    ``choices``)."""
    rule = rule or {
        "duration": rules.scan_interval,
        "boolean": rules.boolean,
        "address": rules.metrics_address,
        "path": rules.path,
        "optional-path": rules.optional(rules.path),
        "optional-name": rules.optional(rules.node_name),
        "engine-list": rules.engine_list,
    }.get(kind)
    choices = extra.get("choices", ())
    assert isinstance(choices, tuple)
    if kind == "choice":
        rule = rules.choice(choices)
    assert rule is not None, kind
    derived = extra.get("derived_default")
    assert derived is None or isinstance(derived, str)
    return Option(field, key, rule, kind, help, reload, choices, derived)


def default_of(field: str) -> object:
    """The default of a field path such as ``scan_interval`` or ``env.uadk_numa_hint``."""
    value: object = Settings()
    for part in field.split("."):
        value = getattr(value, part)
    return value
