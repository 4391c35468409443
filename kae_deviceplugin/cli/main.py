"""The `kae-deviceplugin` command line. Every option is also an environment variable KAE_DP_*."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from kae_deviceplugin import __version__
from kae_deviceplugin.cli.doctor_command import doctor_command
from kae_deviceplugin.cli.entry import serve
from kae_deviceplugin.cli.options import (
    BadInvocation,
    dev_root_option,
    kubelet_root_option,
    list_mode_option,
    option,
    output_option,
    sysfs_root_option,
)
from kae_deviceplugin.cli.serve import serve_options, settings_or_exit
from kae_deviceplugin.cli.serve_args import PROG, unknown_variables
from kae_deviceplugin.config.resolve import check_config
from kae_deviceplugin.config.schema import default_of
from kae_deviceplugin.config.settings import FRONT_ENDS
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.errors import ScanDeferred
from kae_deviceplugin.observability import logs
from kae_deviceplugin.observability.events import log_warning_changes


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kae-deviceplugin")
def main() -> None:
    """Kubernetes device plugin for the Kunpeng Acceleration Engine (HPRE, SEC, ZIP)."""
    for line in unknown_variables(os.environ):
        click.echo(line, err=True)  # serve's usual command line warns in cli.entry instead


@main.command("list")
@sysfs_root_option
@dev_root_option
@output_option
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
@list_mode_option
@kubelet_root_option
@option("--log-level", type=click.Choice(logs.LEVELS), default="warning", show_default=True)
def list_command(
    *,
    sysfs_root: Path,
    dev_root: Path,
    output: str,
    allocations: bool,
    endpoint: str,
    pod_resources_socket: Path,
    mode: str,
    kubelet_root: Path,
    log_level: str,
) -> None:
    """List the KAE devices this node has, with health and the reasons for it."""
    # Imported here, as for doctor and demo: serve, a long-lived process, never needs them, and
    # the allocations client's urllib.request (with http.client and email) is ~1.5 MiB resident.
    from kae_deviceplugin.cli import allocations as allocations_cli  # noqa: PLC0415
    from kae_deviceplugin.cli.listing import render_json, render_table  # noqa: PLC0415

    logs.configure(log_level, "text")
    if mode.lower() == "auto":  # what the daemon chose at its start, in its state directory
        from kae_deviceplugin.cli.doctor_mode import recorded_mode  # noqa: PLC0415

        state_dir = os.environ.get("KAE_DP_STATE_DIR") or str(default_of("state_dir"))
        mode = recorded_mode(Path(state_dir))
    dra = mode.lower() == "dra"
    if allocations and dra:
        raise BadInvocation("--allocations lists the device plugin's pods; --mode dra shows claims")
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
            raise BadInvocation(f"{flag} {root}: not a directory")
    try:
        inventory = scan(sysfs_root, dev_root)
    except ScanDeferred as err:
        raise click.ClickException(str(err)) from None
    log_warning_changes((), inventory.warnings)
    if dra:
        click.echo(_dra_listing(inventory, kubelet_root, output))
        return
    click.echo(render_json(inventory) if output == "json" else render_table(inventory))


def _dra_listing(inventory: Inventory, kubelet_root: Path, output: str) -> str:
    """The DRA listing; a checkpoint that cannot be read is exit 1 naming it, as serve refuses."""
    from kae_deviceplugin.cli import listing_dra  # noqa: PLC0415 -- loads the DRA modules

    where = listing_dra.missing_state(kubelet_root)  # a mistyped root must not read as "free"
    if where is not None:
        exception = BadInvocation if where.startswith("--kubelet-root") else click.ClickException
        raise exception(where)
    try:
        holders = listing_dra.claim_holders(kubelet_root)
    except (listing_dra.CheckpointError, OSError) as err:
        raise click.ClickException(f"cannot read the DRA checkpoint: {err}") from None
    if output == "json":
        return listing_dra.render_json(inventory, holders)
    return listing_dra.render_table(inventory, holders)


@main.command("serve")
@serve_options
@click.pass_context
def serve_command(ctx: click.Context, /, config_path: Path | None, **params: Any) -> None:
    """Run the device-plugin daemon (what the DaemonSet runs)."""
    raise SystemExit(serve(settings_or_exit(ctx, config_path, params)))


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


main.add_command(doctor_command)


@main.command("vf-writer")
@click.option(
    "--requests",
    "requests_dir",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="The directory shared with serve (its paths.vfWriterDir).",
)
@click.option(
    "--sysfs-root",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("/sys"),
    show_default=True,
    help="Where this process sees the host's sysfs, with its PCI devices writable.",
)
def vf_writer_command(requests_dir: Path, sysfs_root: Path) -> None:
    """Write sriov_numvfs of KAE PFs when serve asks (the chart's vf-writer container); never
    anything else."""
    from kae_deviceplugin.daemon.vf_requests import serve_requests  # noqa: PLC0415

    logs.configure("info", "text")
    serve_requests(str(sysfs_root), requests_dir)


@main.command("demo")
@option("--tree", default="kunpeng920-2p", show_default=True, help="Bundled node layout to serve.")
@option(
    "--serve",
    "serve_on",
    metavar="HOST:PORT",
    default=None,
    help="Keep serving after the tour, with /metrics, /readyz and /allocations on HOST:PORT "
    "(port 0: any free port, printed), until Ctrl-C: `serve` run locally against the bundled "
    "kubelet and pod-resources emulators.",
)
@option(
    "--mode",
    type=click.Choice(FRONT_ENDS, case_sensitive=False),
    default=FRONT_ENDS[0],
    show_default=True,
    help="dra: the DRA driver's tour instead: the node's ResourceSlices, a claim by capability "
    "and NUMA node allocated from them, prepared by the driver, its CDI spec and what the "
    "container gets (no cluster; with emulators of the API server, scheduler and runtime).",
)
def demo_command(tree: str, serve_on: str | None, mode: str) -> None:
    """Run the real daemon on a bundled node against a kubelet emulator, and show what it sees."""
    from kae_deviceplugin.cli.demo import run_demo  # noqa: PLC0415 -- keeps the emulator out of serve's start-up

    logs.configure("warning", "text")
    raise SystemExit(run_demo(tree, echo_until_closed, serve_on, mode))


def echo_until_closed(line: str) -> None:
    """click.echo, except that a reader who left (``demo | head -1``) ends the output quietly.

    The demo prints from the daemon's worker thread; a BrokenPipeError there would fail a root
    task and log a traceback. Instead later lines go to /dev/null and the run finishes as usual.
    """
    try:
        click.echo(line)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # also keeps the flush at exit from failing
        os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    main(prog_name=PROG)
