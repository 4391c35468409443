"""The server set on its own, with a recording registrar and real servers on real unix sockets:
it registers only what serves, never while a stream is open, and brings a lost stream back in
the way its registrar asks (a new Register, or a new socket)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import grpc
import pytest

from kae_deviceplugin.api import pb, pb_grpc
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.serving import ServingPolicy
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.views import ResourceView, build_views
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.deviceplugin import server_set as server_set_module
from kae_deviceplugin.deviceplugin.server_set import ServerSet
from kae_deviceplugin.deviceplugin.servicer import socket_path
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import short_tmpdir

HPRE = "openfuyao.com/kae.hpre"
DEADLINE = 10.0


class RecordingRegistrar:
    """Accepts every registration at once and records, for each, how many streams were open."""

    needs_kubelet_socket = True
    socket_dir_role = "device-plugins"
    kubelet_finds_sockets_at_start = False

    def __init__(self, socket_dir: Path, recovery: Literal["register", "restart"]) -> None:
        self.socket_dir = socket_dir
        self.recovery: Literal["register", "restart"] = recovery
        self.registered: list[str] = []
        self.cancelled: list[str] = []
        self.servers: ServerSet | None = None
        self.socket_dir_setting = ("--device-plugin-dir", socket_dir)

    def socket_path(self, resource: str) -> Path:
        return socket_path(self.socket_dir, resource, *self.socket_dir_setting)

    def add_servicers(
        self, server: grpc.aio.Server, resource: str, on: Callable[[str], None]
    ) -> None:
        """Nothing besides the DevicePlugin service."""

    def register(self, resource: str, on_registered: Callable[[str], None]) -> None:
        self.registered.append(resource)
        on_registered(resource)

    def cancel(self, resource: str) -> None:
        self.cancelled.append(resource)

    def registering(self, resource: str) -> bool:
        return False


def views_of_fixture(root: Path) -> dict[str, ResourceView]:
    TREES["kunpeng920-2p"].build(root)
    return build_views(scan(root / "sys", root / "dev"), Settings().engines)


@asynccontextmanager
async def server_set(
    workdir: Path, recovery: Literal["register", "restart"] = "register"
) -> AsyncIterator[tuple[ServerSet, RecordingRegistrar]]:
    sockets = workdir / "dp"
    sockets.mkdir()
    latest = {r: LatestValue(v) for r, v in views_of_fixture(workdir / "node").items()}
    registrar = RecordingRegistrar(sockets, recovery)
    servers = ServerSet(
        registrar,
        latest,
        lambda: ServingPolicy.from_settings(Settings()),
        asyncio.Event(),
        Counters(),
        kubelet_socket=sockets / "kubelet.sock",
    )
    try:
        yield servers, registrar
    finally:
        await servers.stop_all()


@asynccontextmanager
async def stream(
    socket: Path,
) -> AsyncIterator[grpc.aio.UnaryStreamCall[pb.Empty, pb.ListAndWatchResponse]]:
    """A ListAndWatch stream as the kubelet opens it; yields once the first list arrived."""
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        call = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty())
        await asyncio.wait_for(call.read(), DEADLINE)
        try:
            yield call
        finally:
            call.cancel()


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(DEADLINE):
        while not condition():
            await asyncio.sleep(0.005)


def test_start_serves_then_registers_and_streaming_needs_a_new_stream() -> None:
    """start() binds the socket before Register; streaming() waits for a stream opened since."""

    async def main() -> None:
        with short_tmpdir() as workdir:
            async with server_set(workdir) as (servers, registrar):
                await servers.start(HPRE)
                socket = servers.servers[HPRE].socket_path
                assert socket.exists() and registrar.registered == [HPRE]
                assert HPRE in servers.registered and not servers.streaming(HPRE)
                async with stream(socket):
                    await until(lambda: servers.streaming(HPRE))
                await until(lambda: not servers.streaming(HPRE))

    asyncio.run(main())


def test_register_refuses_while_a_stream_is_open() -> None:
    """The invariant behind kubernetes issue 121994: never Register over an open stream."""

    async def main() -> None:
        with short_tmpdir() as workdir:
            async with server_set(workdir) as (servers, _):
                await servers.start(HPRE)
                async with stream(servers.servers[HPRE].socket_path):
                    await until(lambda: servers.servers[HPRE].servicer.streams == 1)
                    with pytest.raises(AssertionError, match="stream still open"):
                        servers.register(HPRE)

    asyncio.run(main())


def test_restart_ends_the_old_stream_before_registering_again() -> None:
    """restart() stops the server (its stream ends), then starts a new one and registers it."""

    async def main() -> None:
        with short_tmpdir() as workdir:
            async with server_set(workdir) as (servers, registrar):
                await servers.start(HPRE)
                old = servers.servers[HPRE]
                async with stream(old.socket_path) as call:
                    await until(lambda: old.servicer.streams == 1)
                    await servers.restart_all("test")
                    assert old.servicer.streams == 0
                    with pytest.raises(grpc.aio.AioRpcError):
                        await asyncio.wait_for(call.read(), DEADLINE)
                assert registrar.cancelled == [HPRE]
                assert registrar.registered == [HPRE, HPRE]
                assert servers.servers[HPRE] is not old

    asyncio.run(main())


@pytest.mark.parametrize("recovery", ["register", "restart"])
def test_a_lost_stream_is_brought_back_as_the_registrar_asks(
    monkeypatch: pytest.MonkeyPatch, recovery: Literal["register", "restart"]
) -> None:
    """No stream for STREAM_GRACE: a new Register ("register") or a new socket ("restart")."""
    monkeypatch.setattr(server_set_module, "STREAM_GRACE", 0.05)

    async def main() -> None:
        with short_tmpdir() as workdir:
            async with server_set(workdir, recovery) as (servers, registrar):
                await servers.start(HPRE)
                first = servers.servers[HPRE]
                async with stream(first.socket_path):
                    await until(lambda: servers.streaming(HPRE))
                await until(lambda: len(registrar.registered) == 2)
                if recovery == "restart":  # the old server stopped, a new socket was made
                    assert servers.servers[HPRE] is not first and registrar.cancelled == [HPRE]
                    assert servers.servers[HPRE].socket_intact()
                else:
                    assert servers.servers[HPRE] is first and registrar.cancelled == []

    asyncio.run(main())
