"""The kubelet watch on its own, over a real server set (recording registrar) and a real
kubelet.sock: a re-created kubelet.sock restarts and re-registers every server where the kubelet
deletes plugin sockets, is left to the kubelet where its plugin watcher finds them, and a swept
socket of ours is re-created while a live kubelet answers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kae_deviceplugin.deviceplugin.kubelet_watch import KubeletWatch
from kae_deviceplugin.deviceplugin.server_set import ServerSet
from tests.deviceplugin.test_server_set import HPRE, RecordingRegistrar, server_set, until
from tests.support.harness import short_tmpdir


def listen(path: Path) -> socket.socket:
    """A live kubelet.sock (a listening unix socket that accepts)."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(8)
    return sock


@dataclass
class Watched:
    """A started HPRE server under a running kubelet watch, and a live kubelet.sock."""

    servers: ServerSet
    registrar: RecordingRegistrar
    kubelet: socket.socket
    ticks: list[None] = field(default_factory=list)

    def restart_kubelet(self) -> None:
        self.kubelet.close()
        self.kubelet = listen(self.servers.kubelet_socket)


@asynccontextmanager
async def watching(finds_sockets: bool = False) -> AsyncIterator[Watched]:
    with short_tmpdir() as workdir:
        async with server_set(workdir) as (servers, registrar):
            registrar.kubelet_finds_sockets_at_start = finds_sockets
            watched = Watched(servers, registrar, listen(servers.kubelet_socket))
            await servers.start(HPRE)
            watch = KubeletWatch(registrar.socket_dir, servers, lambda: watched.ticks.append(None))
            task = asyncio.create_task(watch.run())
            try:
                await until(lambda: len(watched.ticks) == 1)
                yield watched
            finally:
                task.cancel()
                watched.kubelet.close()


@pytest.mark.parametrize("finds_sockets", [False, True], ids=["kubelet-socket", "plugin-watcher"])
def test_a_new_kubelet_socket_restarts_servers_unless_the_kubelet_finds_them(
    finds_sockets: bool,
) -> None:
    """kubelet.sock re-created: restart_all (Register again), or nothing for the plugin watcher."""

    async def main() -> None:
        async with watching(finds_sockets) as w:
            w.restart_kubelet()
            await until(lambda: w.servers.counters.sample("kae_kubelet_restarts_total") == 1)
            # The next tick comes after the check that counted the restart has ended.
            await until(lambda: len(w.ticks) >= 2)
            assert len(w.registrar.registered) == (1 if finds_sockets else 2)

    asyncio.run(main())


def test_a_swept_socket_of_ours_is_recreated_while_the_kubelet_answers() -> None:
    """Our socket removed while kubelet.sock stays live: that server restarts and registers."""

    async def main() -> None:
        async with watching() as w:
            w.servers.servers[HPRE].socket_path.unlink()
            await until(lambda: len(w.registrar.registered) == 2)
            assert w.servers.servers[HPRE].socket_intact()

    asyncio.run(main())


def test_a_vanished_kubelet_clears_registrations_and_waits() -> None:
    """kubelet.sock gone: nothing counts as registered, nothing is restarted."""

    async def main() -> None:
        async with watching() as w:
            w.kubelet.close()
            w.servers.kubelet_socket.unlink()
            await until(lambda: not w.servers.registered)
            assert w.registrar.registered == [HPRE]

    asyncio.run(main())
