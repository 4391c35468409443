"""The DRA servicers on a real unix socket, as the daemon will serve them."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc

from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra.health import add_health_servicers
from kae_deviceplugin.dra.plugin import Answered, Preparer, add_plugin_servicers


@contextlib.contextmanager
def socket_dir() -> Iterator[Path]:
    """A directory under /tmp: unix socket paths must stay under ~100 bytes."""
    path = Path(tempfile.mkdtemp(prefix="kaedra", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.asynccontextmanager
async def serving(
    socket: Path,
    preparer: Preparer,
    latest: LatestValue[Inventory],
    pool: str,
    *,
    interval: float = 15.0,
    answered: Answered = lambda: None,
) -> AsyncIterator[None]:
    """Both DRAPlugin and both DRAResourceHealth versions on ``socket`` while the block runs."""
    server = grpc.aio.server()
    add_plugin_servicers(server, preparer, answered)
    add_health_servicers(server, latest, pool, interval=interval)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    try:
        yield
    finally:
        await server.stop(None)
