"""serve's command line read without click (cli/serve_args.read) against click's own reading:
the same settings, their sources and config path for every command line it takes, click for
every one it leaves, and the same warnings and refusals from the program as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from kae_deviceplugin.cli import serve_args
from kae_deviceplugin.cli.main import main
from kae_deviceplugin.cli.serve import given_from, serve_options
from kae_deviceplugin.config.schema import ENV_PREFIX
from kae_deviceplugin.errors import InvalidConfig

REPO = Path(__file__).resolve().parents[2]
FLAGS = sorted(f for f in serve_args.FLAGS if f != "--config")
VARIABLES = sorted(serve_args.KNOWN_VARIABLES)
VALUES = ["on", "off", "dra", "", "x y", "/abs/path", "rel/path", "hpre,sec", "zip", "5s", "a=b"]


@click.command()
@serve_options
@click.pass_context
def read_by_click(ctx: click.Context, /, config_path: Path | None, **params: Any) -> None:
    """What serve's click command reads, printed for the comparison."""
    click.echo(repr(outcome(config_path, given_from(ctx, params))))


def outcome(config_path: Path | None, given: serve_args.Given) -> object:
    """The overrides and their sources that ``given`` makes, or the refusal."""
    try:
        return config_path, serve_args.overrides_of(given, os.environ)
    except InvalidConfig as err:
        return config_path, str(err)


def by_click(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    result = CliRunner().invoke(read_by_click, argv, env=env)
    return result.exit_code, result.output


def by_reader(argv: list[str], env: dict[str, str]) -> str | None:
    call = serve_args.read(["serve", *argv], env)
    if call is None:
        return None
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        return repr(outcome(call.config_path, call.given)) + "\n"


@st.composite
def command_lines(draw: st.DrawFn) -> tuple[list[str], dict[str, str]]:
    argv: list[str] = []
    for flag in draw(st.lists(st.sampled_from(FLAGS), max_size=5)):
        value = draw(st.sampled_from(VALUES))
        argv += [f"{flag}={value}"] if draw(st.booleans()) else [flag, value]
    env = draw(st.dictionaries(st.sampled_from(VARIABLES), st.sampled_from(VALUES), max_size=5))
    return argv, env


@given(command_lines())
def test_every_command_line_it_takes_reads_as_click_reads_it(
    line: tuple[list[str], dict[str, str]],
) -> None:
    argv, env = line
    mine = by_reader(argv, env)
    if mine is not None:
        assert by_click(argv, env) == (0, mine)


def test_the_charts_command_line_is_taken_with_its_config_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    env = {"KAE_DP_DEV_ROOT": "/host/dev"}
    call = serve_args.read(["serve", f"--config={config}"], env)
    assert call is not None and call.config_path == config
    assert call.given == {"dev_root": ("/host/dev", True)}
    assert by_click([f"--config={config}"], env) == (0, by_reader([f"--config={config}"], env))
    assert serve_args.read(["serve", "--config", str(config / "missing")], {}) is not None


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["list"],
        ["--version"],
        ["serve", "--help"],
        ["serve", "-h"],
        ["serve", "--mod=dra"],
        ["serve", "positional"],
        ["serve", "--mode"],
        ["serve", "--mode", "dra", "--mode", "off"],
        ["serve", "--sysfs-root", "-x"],
        ["serve", "--config="],
    ],
    ids=repr,
)
def test_anything_else_is_left_to_click(argv: list[str]) -> None:
    assert serve_args.read(argv, {}) is None


def test_a_config_path_click_refuses_is_left_to_click(tmp_path: Path) -> None:
    assert serve_args.read(["serve", "--config", str(tmp_path)], {}) is None
    code, output = by_click(["--config", str(tmp_path)], {})
    assert code == 2 and "is a directory" in output


def test_shell_completion_is_left_to_click() -> None:
    assert serve_args.read(["serve"], {"_KAE_DEVICEPLUGIN_COMPLETE": "bash_source"}) is None


def test_the_known_variables_are_those_of_every_command() -> None:
    """Without click, serve warns of an unknown KAE_DP_* variable from a list of its own: it
    must name exactly the variables click's commands read."""
    declared: set[str] = set()
    for command in main.commands.values():
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            declared.update([envvar] if isinstance(envvar, str) else envvar or ())
    assert declared == serve_args.KNOWN_VARIABLES
    assert all(v.startswith(ENV_PREFIX) for v in declared)


def run_serve(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", "serve", *argv],
        check=False, capture_output=True, text=True, timeout=60, cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)} | env,
    )  # fmt: skip


def test_the_program_warns_and_refuses_as_click_does() -> None:
    """A typo'd variable and a bad value: the same warning, error lines and exit 2 from the
    process (read without click) as from the click command."""
    env = {"KAE_DP_MOED": "dra", "KAE_DP_LOG_LEVEL": "loud"}
    done = run_serve("--metrics-address", "nowhere", env=env)
    clicked = CliRunner().invoke(main, ["serve", "--metrics-address", "nowhere"], env=env)
    assert done.returncode == clicked.exit_code == 2
    assert done.stderr == clicked.stderr
    assert done.stderr.startswith("warning: KAE_DP_MOED is not a kae-deviceplugin variable")
    assert "error: " in done.stderr and "--metrics-address" in done.stderr
