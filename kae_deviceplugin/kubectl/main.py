"""The ``kubectl-kae`` console script: ``kubectl kae nodes | devices | why``.

Exit codes: 0 the command answered (``why`` explained, whatever it found); 1 the cluster could
not be read (one line naming the server and the cause); 2 a usage error; 3 ``why`` without the
CEL library (one line saying what to install).
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from kae_deviceplugin import __version__
from kae_deviceplugin.apiserver.lightkube_reads import connect_reader
from kae_deviceplugin.apiserver.reads import ClusterReads
from kae_deviceplugin.errors import ApiError
from kae_deviceplugin.kubectl.cel import CelUnavailable, require_cel
from kae_deviceplugin.kubectl.cluster import read_cluster
from kae_deviceplugin.kubectl.devices import TABLE_HEADERS, device_rows, table_row
from kae_deviceplugin.kubectl.nodes import NodeSummary, summarize
from kae_deviceplugin.kubectl.render import as_json, table
from kae_deviceplugin.kubectl.why import explain, explanation_text

T = TypeVar("T")
PROG = "kubectl-kae"
ENGINE_ORDER = ("hpre", "sec", "zip")
CANNOT_READ, NO_CEL = 1, 3


@dataclass(frozen=True)
class Access:
    kubeconfig: Path | None
    context: str | None


def _read(access: Access, job: Callable[[ClusterReads], Awaitable[T]]) -> T:
    """Run ``job`` with a reader; a read that fails ends the process with one line."""

    async def run() -> T:
        reads = connect_reader(access.kubeconfig, access.context)
        try:
            return await job(reads)
        except ApiError as err:
            said = str(err)  # names the server already when the client reached for it
            where = "" if reads.server in said else f" at {reads.server}"
            raise ApiError(f"cannot read the cluster{where}: {said}") from err
        finally:
            await reads.close()

    try:
        return asyncio.run(run())
    except ApiError as err:
        click.echo(f"{PROG}: {err}", err=True)
        sys.exit(CANNOT_READ)


def common(command: Callable[..., None]) -> Callable[..., None]:
    """The options every command takes, after its name as kubectl users write them."""

    @click.option("--kubeconfig", type=click.Path(path_type=Path, dir_okay=False),
                  help="Default: KUBECONFIG, ~/.kube/config, else the pod's account.")  # fmt: skip
    @click.option("--context", help="The kubeconfig context (default: its current one).")
    @click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table",
                  show_default=True)  # fmt: skip
    @functools.wraps(command)
    def wrapped(kubeconfig: Path | None, context: str | None, **kwargs: Any) -> None:
        command(Access(kubeconfig, context), **kwargs)

    return wrapped


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name=PROG)
def cli() -> None:
    """The KAE pool as the API holds it (read-only: get and list on nodes, pods,
    resourceslices, resourceclaims, resourceclaimtemplates and deviceclasses)."""


def _engine_cell(summary: NodeSummary, engine: str) -> str:
    count = summary.engines.get(engine)
    return "-" if count is None else f"{count.total}/{count.healthy}/{count.allocated}/{count.free}"


@cli.command()
@common
def nodes(access: Access, output: str) -> None:
    """One row per node with KAE devices: mode (and, where mode auto chose it, why), and per
    engine total/healthy/allocated/free."""
    summaries = summarize(_read(access, read_cluster))
    if output == "json":
        click.echo(as_json([s.as_json() for s in summaries]), nl=False)
        return
    engines = [e for e in ENGINE_ORDER if any(e in s.engines for s in summaries)]
    extra = sorted({e for s in summaries for e in s.engines} - set(engines))
    headers = ["NODE", "MODE", *[f"{e.upper()} T/H/A/F" for e in [*engines, *extra]]]
    rows = [[s.node, s.mode, *[_engine_cell(s, e) for e in [*engines, *extra]]] for s in summaries]
    if any(s.reason for s in summaries):  # mode auto chose somewhere: why, beside the mode
        headers.insert(2, "WHY")
        for row, summary in zip(rows, summaries, strict=True):
            row.insert(2, summary.reason or "-")
    click.echo(table(headers, rows), nl=False)


@cli.command()
@common
@click.option("--node", help="Only this node's devices.")
def devices(access: Access, output: str, node: str | None) -> None:
    """One row per DRA device: health and reasons, the claims (and pods) holding it, queues."""

    async def job(reads: ClusterReads) -> Any:
        return await read_cluster(reads, pods=False)

    rows = device_rows(_read(access, job).pool, node)
    if output == "json":
        click.echo(as_json([r.as_json() for r in rows]), nl=False)
    else:
        click.echo(table(TABLE_HEADERS, [table_row(r) for r in rows]), nl=False)


@cli.command()
@common
@click.argument("target")
@click.option("-n", "--namespace", help="The pod's namespace (default: the context's).")
def why(access: Access, output: str, target: str, namespace: str | None) -> None:
    """Why pod/NAME's KAE devices cannot be placed, per node and request (or what it holds)."""
    kind, sep, name = target.partition("/")
    if not sep:
        kind, name = "pod", target
    if kind not in ("pod", "pods", "po") or not name:
        raise click.UsageError(f"{target}: name a pod as pod/NAME")
    try:
        require_cel()
    except CelUnavailable as err:
        click.echo(f"{PROG}: {err}", err=True)
        sys.exit(NO_CEL)

    async def job(reads: ClusterReads) -> Any:
        return await explain(reads, namespace or reads.namespace, name)

    found = _read(access, job)
    if output == "json":
        click.echo(as_json(found.as_json()), nl=False)
    else:
        click.echo(explanation_text(found), nl=False)


def main() -> None:
    cli(prog_name=PROG)
