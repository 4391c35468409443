"""The `kae-deviceplugin` command line. Every option is also an environment variable KAE_DP_*."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kae_deviceplugin import __version__
from kae_deviceplugin.cli import allocations as allocations_cli
from kae_deviceplugin.cli.listing import render_json, render_table
from kae_deviceplugin.config.file import InvalidConfig
from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.config.settings import Settings, check_config, resolve_settings
from kae_deviceplugin.daemon.run import run_serve
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.observability import logs
from kae_deviceplugin.observability.events import log_warning_changes

ENV_PREFIX = "KAE_DP_"
F = TypeVar("F", bound=Callable[..., Any])


def option(*decls: str, **attrs: Any) -> Callable[[F], F]:
    """A click option whose environment variable is KAE_DP_<LONG NAME IN UPPER SNAKE>."""
    long_name = next(d for d in decls if d.startswith("--"))
    attrs.setdefault("envvar", ENV_PREFIX + long_name[2:].replace("-", "_").upper())
    attrs.setdefault("show_envvar", True)
    return click.option(*decls, **attrs)


sysfs_root_option = option(
    "--sysfs-root",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("/sys"),
    show_default=True,
    help="Root of the sysfs tree to scan (a fixture tree's sys/ in tests).",
)
dev_root_option = option(
    "--dev-root",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("/dev"),
    show_default=True,
    help="Directory holding the uacce device nodes.",
)
log_level_option = option(
    "--log-level", type=click.Choice(logs.LEVELS), default="info", show_default=True
)
log_format_option = option(
    "--log-format", type=click.Choice(logs.FORMATS), default="text", show_default=True
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kae-deviceplugin")
def main() -> None:
    """Kubernetes device plugin for the Kunpeng Acceleration Engine (HPRE, SEC, ZIP)."""


@main.command("list")
@sysfs_root_option
@dev_root_option
@option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people; json is a stable interface for scripts.",
)
@option(
    "--allocations",
    is_flag=True,
    help="List which pod holds which device instead (asks a running daemon, else the kubelet).",
)
@option(
    "--endpoint",
    default="http://127.0.0.1:9410",
    show_default=True,
    help="A running daemon's metrics endpoint, asked first by --allocations.",
)
@option(
    "--pod-resources-socket",
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
    show_default=True,
    help="The kubelet's pod-resources socket, asked when the daemon does not answer.",
)
@option("--log-level", type=click.Choice(logs.LEVELS), default="warning", show_default=True)
def list_command(
    *,
    sysfs_root: Path,
    dev_root: Path,
    output: str,
    allocations: bool,
    endpoint: str,
    pod_resources_socket: Path,
    log_level: str,
) -> None:
    """List the KAE devices this node has, with health and the reasons for it."""
    logs.configure(log_level, "text")
    if allocations:
        try:
            rows, _source = allocations_cli.gather(endpoint, pod_resources_socket)
        except allocations_cli.AllocationsUnavailable as err:
            raise click.ClickException(f"cannot list allocations: {err}") from err
        render = allocations_cli.render_json if output == "json" else allocations_cli.render_table
        click.echo(render(rows))
        return
    for flag, root in (("--sysfs-root", sysfs_root), ("--dev-root", dev_root)):
        if not root.is_dir():
            raise click.ClickException(f"{flag} {root}: not a directory")
    inventory = scan(sysfs_root, dev_root)
    log_warning_changes((), inventory.warnings)
    click.echo(render_json(inventory) if output == "json" else render_table(inventory))


def _on_off(value: str | None) -> bool | None:
    return None if value is None else value == "on"


# serve's options, each mapped onto the Settings field of the same name. Defaults live in
# Settings (and the file), so an option only overrides when it was given on the command line
# or in the environment: flags > env > file > defaults.
SERVE_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--sysfs-root", {"type": click.Path(path_type=Path), "help": "sysfs to scan [/sys]"}),
    ("--dev-root", {"type": click.Path(path_type=Path), "help": "uacce device nodes [/dev]"}),
    ("--kubelet-root", {"type": click.Path(path_type=Path), "help": "[/var/lib/kubelet]"}),
    (
        "--device-plugin-dir",
        {"type": click.Path(path_type=Path), "help": "[<kubelet-root>/device-plugins]"},
    ),
    (
        "--pod-resources-socket",
        {"type": click.Path(path_type=Path), "help": "[<kubelet-root>/pod-resources/kubelet.sock]"},
    ),
    (
        "--registration",
        {"type": click.Choice(["auto", "kubelet-socket", "plugin-watcher"]), "help": "[auto]"},
    ),
    ("--scan-interval", {"type": str, "help": "seconds or a duration such as 500ms [1s]"}),
    (
        "--metrics-address",
        {"type": str, "help": "HOST:PORT for /metrics, /healthz, /readyz; empty disables [:9410]"},
    ),
    ("--state-dir", {"type": click.Path(path_type=Path), "help": "[/var/lib/kae-deviceplugin]"}),
    ("--nfd-features-file", {"type": str, "help": "NFD local feature file; empty disables"}),
    ("--container-sysfs-view", {"type": click.Choice(["on", "off"]), "help": "[on]"}),
    ("--cdi", {"type": click.Choice(["on", "off"]), "help": "[off]"}),
    ("--cdi-dir", {"type": click.Path(path_type=Path), "help": "[/var/run/cdi]"}),
    ("--allocation-policy", {"type": click.Choice(["balanced", "packed"]), "help": "[balanced]"}),
    ("--log-level", {"type": click.Choice(logs.LEVELS), "help": "[info]"}),
    ("--log-format", {"type": click.Choice(logs.FORMATS), "help": "[text]"}),
)
_CONVERT: dict[str, Callable[[Any], object]] = {
    "container_sysfs_view": _on_off,
    "cdi": _on_off,
    "nfd_features_file": lambda v: Path(v).absolute() if v else None,
}


def _convert(name: str, value: object) -> object:
    """Command-line paths may be relative to the working directory; settings hold absolute ones."""
    if name in _CONVERT:
        return _CONVERT[name](value)
    return value.absolute() if isinstance(value, Path) else value


def serve_options(func: F) -> F:
    for name, attrs in reversed(SERVE_OPTIONS):
        func = option(name, default=None, **attrs)(func)
    return option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="YAML configuration file (version: v1); reloaded on change and on SIGHUP.",
    )(func)


def overrides_from(
    ctx: click.Context, params: dict[str, Any]
) -> tuple[dict[str, object], dict[str, str]]:
    """The options given on the command line or in the environment, and how to name each."""
    given: dict[str, object] = {}
    sources: dict[str, str] = {}
    for name, value in params.items():
        source = ctx.get_parameter_source(name)
        if name == "config_path" or source not in (
            click.core.ParameterSource.COMMANDLINE,
            click.core.ParameterSource.ENVIRONMENT,
        ):
            continue
        given[name] = _convert(name, value)
        flag = "--" + name.replace("_", "-")
        sources[name] = (
            ENV_PREFIX + name.upper() if source is click.core.ParameterSource.ENVIRONMENT else flag
        )
    return given, sources


def load_settings(
    config_path: Path | None, overrides: dict[str, object], sources: dict[str, str]
) -> tuple[Settings, ConfigSource | None]:
    """Settings for serve; every problem of flags, env and file reported at once (exit 2)."""
    try:
        if config_path is None:
            return resolve_settings(None, overrides, sources=sources), None
        source = ConfigSource(config_path, overrides, sources)
        return source.initial(), source
    except InvalidConfig as err:
        for line in err.lines():
            click.echo(f"error: {line}", err=True)
        raise SystemExit(2) from err


@main.command("serve")
@serve_options
@click.pass_context
def serve_command(ctx: click.Context, /, config_path: Path | None, **params: Any) -> None:
    """Run the device-plugin daemon (what the DaemonSet runs)."""
    overrides, sources = overrides_from(ctx, params)
    settings, source = load_settings(config_path, overrides, sources)
    logs.configure(settings.log_level, settings.log_format)
    raise SystemExit(run_serve(settings, source))


@main.command("check-config")
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False))
def check_config_command(path: Path) -> None:
    """Validate a configuration file without running anything; lists every problem."""
    problems = check_config(path)
    for line in problems:
        click.echo(line, err=True)
    if problems:
        raise SystemExit(1)
    click.echo(f"{path}: valid")


@main.command("demo")
@option("--tree", default="kunpeng920-2p", show_default=True, help="Bundled node layout to serve.")
def demo_command(tree: str) -> None:
    """Run the real daemon on a bundled node against a kubelet emulator, and show what it sees."""
    from kae_deviceplugin.cli.demo import run_demo  # noqa: PLC0415 -- keeps the emulator out of serve's start-up

    logs.configure("warning", "text")
    raise SystemExit(run_demo(tree, click.echo))


if __name__ == "__main__":  # pragma: no cover
    main(prog_name="kae-deviceplugin")
