"""The ``kubectl-kae`` console script: ``kubectl kae nodes | devices | why``.

Exit codes: 0 the command answered (``why`` explained, whatever it found); 1 the cluster could
not be read (one line naming the server and the cause); 2 a usage error; 3 ``why`` without the
CEL library (one line saying what to install).
"""

from __future__ import annotations

import asyncio
import functools
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from kae_deviceplugin import __version__
from kae_deviceplugin.apiserver.reads import ClusterReads
from kae_deviceplugin.apiserver.rest_reads import Access as Credentials
from kae_deviceplugin.apiserver.rest_reads import connect_reads
from kae_deviceplugin.errors import ApiError, KaeDevicePluginError
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
DEADLINE = 60.0  # the whole command, unless --request-timeout says otherwise ("0": none)
CREDENTIAL_OPTIONS = ("kubeconfig", "context", "as_user", "server", "token")  # Credentials' order
UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "ms": 0.001}


@dataclass(frozen=True)
class Access:
    credentials: Credentials
    namespace: str | None = None
    deadline: float | None = DEADLINE


def _read(access: Access, job: Callable[[ClusterReads], Awaitable[T]]) -> T:
    """Run ``job`` with a reader within the deadline; a read that fails ends the process with
    one line."""

    async def run() -> T:
        reads = connect_reads(access.credentials)
        try:
            async with asyncio.timeout(access.deadline):
                return await job(reads)
        except TimeoutError:
            said = f"no complete answer within {access.deadline:g} s (--request-timeout)"
            raise ApiError(f"cannot read the cluster at {reads.server}: {said}") from None
        except ApiError as err:
            said = str(err)  # names the server already when the client reached for it
            where = "" if reads.server in said else f" at {reads.server}"
            raise ApiError(f"cannot read the cluster{where}: {said}") from err
        finally:
            await reads.close()

    try:
        return asyncio.run(run())
    except ApiError as err:
        click.echo(f"{PROG}: {_one_line(str(err))}", err=True)
        sys.exit(CANNOT_READ)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _duration(text: str) -> float | None:
    """kubectl's --request-timeout: a number of seconds or 1s, 2m, 3h; 0: no deadline."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h|)", text.strip())
    if match is None:
        raise click.BadParameter(f"{text!r}: write seconds (30) or a duration (30s, 2m, 1h)")
    seconds = float(match.group(1)) * UNITS[match.group(2)]
    return seconds or None


def common(command: Callable[..., None]) -> Callable[..., None]:
    """The options every command takes, after its name as kubectl users write them."""

    @click.option("--kubeconfig", type=click.Path(path_type=Path, dir_okay=False),
                  help="Default: KUBECONFIG (merged), ~/.kube/config, else the pod's.")  # fmt: skip
    @click.option("--context", help="The kubeconfig context (default: its current one).")
    @click.option("--as", "as_user", help="Impersonate this user, as kubectl --as does.")
    @click.option("--server", help="The API server's URL, instead of the context's.")
    @click.option("--token", help="A bearer token, instead of the context's credentials.")
    @click.option("-n", "--namespace", help="The namespace (why's pod; default: the context's).")
    @click.option("--request-timeout", default=f"{DEADLINE:g}s", show_default=True,
                  help="The deadline of the whole command (0: none).")  # fmt: skip
    @click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table",
                  show_default=True)  # fmt: skip
    @functools.wraps(command)
    def wrapped(**options: Any) -> None:
        credentials = Credentials(*(options.pop(name) for name in CREDENTIAL_OPTIONS))
        deadline = _duration(options.pop("request_timeout"))
        command(Access(credentials, options.pop("namespace"), deadline), **options)

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
    """One row per node with KAE devices: mode, and per engine total/healthy/allocated/free."""
    summaries = summarize(_read(access, read_cluster))
    if output == "json":
        click.echo(as_json([s.as_json() for s in summaries]), nl=False)
        return
    engines = [e for e in ENGINE_ORDER if any(e in s.engines for s in summaries)]
    extra = sorted({e for s in summaries for e in s.engines} - set(engines))
    headers = ["NODE", "MODE", *[f"{e.upper()} T/H/A/F" for e in [*engines, *extra]]]
    rows = [[s.node, s.mode, *[_engine_cell(s, e) for e in [*engines, *extra]]] for s in summaries]
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
def why(access: Access, output: str, target: str) -> None:
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
        return await explain(reads, access.namespace or reads.namespace, name)

    found = _read(access, job)
    if output == "json":
        click.echo(as_json(found.as_json()), nl=False)
    else:
        click.echo(explanation_text(found), nl=False)


def main() -> None:
    """The command, never a traceback: a kubeconfig or client error is one line (exit 1), an
    error of ours too, with what it was; Ctrl-C ends quietly (exit 130)."""
    try:
        cli(prog_name=PROG, standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except (click.Abort, KeyboardInterrupt):
        sys.exit(130)
    except KaeDevicePluginError as err:  # a kubeconfig that cannot be used, found at connect
        click.echo(f"{PROG}: {_one_line(str(err))}", err=True)
        sys.exit(CANNOT_READ)
    except Exception as err:
        said = _one_line(str(err))[:300]
        click.echo(f"{PROG}: unexpected {type(err).__name__}: {said}", err=True)
        sys.exit(CANNOT_READ)
