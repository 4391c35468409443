"""The settings table: every source of a setting is derived from it, and the docs are current."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args, get_type_hints

import click
import pytest
from click.testing import CliRunner

from kae_deviceplugin.cli import serve_args
from kae_deviceplugin.cli.main import main
from kae_deviceplugin.cli.serve import given_from, serve_options
from kae_deviceplugin.config.reference import render_reference
from kae_deviceplugin.config.schema import (
    ENGINE_FIELDS,
    OPTIONS,
    OPTIONS_BY_FIELD,
    default_of,
)
from kae_deviceplugin.config.settings import EngineSettings, EnvSettings, Settings

REPO = Path(__file__).resolve().parents[2]


def test_every_settings_field_has_exactly_one_row() -> None:
    """A field without a row could never be set; a row without a field would break at start."""
    top = {f.name for f in dataclasses.fields(Settings)} - {"engines", "env"}
    env = {"env." + f.name for f in dataclasses.fields(EnvSettings)}
    assert set(OPTIONS_BY_FIELD) == top | env
    assert len(OPTIONS_BY_FIELD) == len(OPTIONS)
    assert set(ENGINE_FIELDS) == {f.name for f in dataclasses.fields(EngineSettings)}


def test_every_default_as_shown_is_read_back_as_the_default() -> None:
    """The default printed in --help and the docs, fed to the setting's rule, is the default."""
    for option in OPTIONS:
        if option.derived_default is not None:
            continue
        shown = option.default_text()
        written = "" if shown == '""' else shown
        assert option.rule(written) == default_of(option.field), option.field


def test_choices_are_the_literal_types_of_their_fields() -> None:
    """A closed set is written once, as the field's Literal type; the table takes it from there."""
    hints = get_type_hints(Settings)
    for option in OPTIONS:
        if option.kind == "choice":
            assert option.choices == get_args(hints[option.field]), option.field


def test_flags_and_variables_follow_one_naming_rule() -> None:
    """--scan-interval is KAE_DP_SCAN_INTERVAL; names are unique across the table."""
    for option in OPTIONS:
        assert option.env_var == "KAE_DP_" + option.flag[2:].replace("-", "_").upper()
    assert len({o.flag for o in OPTIONS}) == len(OPTIONS)


def test_the_configuration_reference_is_current() -> None:
    """docs/configuration.md carries the table rendered from the code, unedited."""
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert render_reference() in text
    done = subprocess.run(
        [sys.executable, "scripts/render-config-reference.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_every_serve_option_has_a_description_and_its_default() -> None:
    """serve --help describes every option, and shows the same default the docs show."""
    ctx = click.Context(main)
    serve = main.get_command(ctx, "serve")
    assert serve is not None
    for param in serve.params:
        assert isinstance(param, click.Option)
        assert param.help and len(param.help.split()) >= 3, param.name
    for option in OPTIONS:
        param = next(p for p in serve.params if option.flag in p.opts)
        assert isinstance(param, click.Option)
        assert f"[default: {option.default_text()}]" in (param.help or "")


@click.command()
@serve_options
@click.pass_context
def resolved(ctx: click.Context, /, config_path: Path | None, **params: Any) -> None:
    """serve's options and resolution, stopping before anything runs."""
    click.echo(repr(serve_args.load(config_path, given_from(ctx, params), os.environ).settings))


def settings_from(args: list[str], env: dict[str, str] | None = None) -> str:
    """The repr of the settings serve would run with, or the error it stops with."""
    result = CliRunner().invoke(resolved, args, env=env)
    return result.output if result.exception is None else f"error: {result.exception}"


@pytest.mark.parametrize("value", ["true", "ON", "yes", "1", "on"])
def test_boolean_variables_accept_every_documented_spelling(value: str) -> None:
    """KAE_DP_CONTAINER_SYSFS_VIEW=true (or ON, yes, 1) means on, as the docs say."""
    off = settings_from([], {"KAE_DP_CONTAINER_SYSFS_VIEW": "off"})
    assert "container_sysfs_view=False" in off
    on = settings_from([], {"KAE_DP_CONTAINER_SYSFS_VIEW": value})
    assert "container_sysfs_view=True" in on


def test_choices_accept_any_case() -> None:
    """--registration AUTO and --allocation-policy Packed mean auto and packed."""
    out = settings_from(["--registration", "AUTO", "--allocation-policy", "Packed"])
    assert "registration='auto'" in out
    assert "allocation_policy='packed'" in out


def test_a_bad_flag_value_names_the_flag_and_the_rule() -> None:
    """A wrong value is refused with the flag that held it and why."""
    out = settings_from(["--scan-interval", "soon"])
    assert "--scan-interval" in out
    assert "duration" in out


def test_enable_engines_serves_exactly_the_named_engines() -> None:
    """--enable-engines hpre,sec enables those two and disables zip."""
    out = settings_from(["--enable-engines", "HPRE, sec"])
    assert "'zip': EngineSettings(enabled=False" in out
    assert "'hpre': EngineSettings(enabled=True" in out
    bad = settings_from([], {"KAE_DP_ENABLE_ENGINES": "hpre,zipp"})
    assert "KAE_DP_ENABLE_ENGINES" in bad
    assert "did you mean 'zip'" in bad


def test_env_settings_have_flags_too() -> None:
    """--uadk-numa-hint, --openssl-engines and --openssl-conf set the container env settings."""
    out = settings_from(["--uadk-numa-hint", "yes", "--openssl-engines", "/opt/engines"])
    assert (
        "EnvSettings(uadk_numa_hint=True, openssl_engines='/opt/engines', openssl_conf=False)"
        in out
    )
    assert "openssl_conf=True" in settings_from(["--openssl-conf", "on"])


def test_dra_taint_and_sharing_settings_have_flags_and_variables() -> None:
    """--unhealthy-taint-effect takes the API's effect in any case; KAE_DP_SHARED_ENGINES takes
    a comma list, and an unknown engine is refused naming the variable with a suggestion."""
    out = settings_from(["--unhealthy-taint-effect", "noexecute"])
    assert "unhealthy_taint_effect='NoExecute'" in out
    default = settings_from([])
    assert "unhealthy_taint_effect='NoSchedule'" in default
    assert "shared_engines=frozenset()" in default
    shared = settings_from([], {"KAE_DP_SHARED_ENGINES": "zip,sec"})
    assert "shared_engines=frozenset({" in shared and "'zip'" in shared and "'sec'" in shared
    bad = settings_from(["--shared-engines", "zipp"])
    assert "--shared-engines" in bad and "did you mean 'zip'" in bad
