"""The kubelet watch on its own, over a real server set (recording registrar) and a real
kubelet.sock: a re-created kubelet.sock restarts and re-registers every server where the kubelet
deletes plugin sockets, is left to the kubelet where its plugin watcher finds them, and a swept
socket of ours is re-created while a live kubelet answers."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from kae_deviceplugin.deviceplugin.kubelet_watch import KubeletWatch
from tests.deviceplugin.test_server_set import HPRE, server_set, until
from tests.support.harness import short_tmpdir


def listen(path: Path) -> socket.socket:
    """A live kubelet.sock (a listening unix socket that accepts)."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(8)
    return sock


@pytest.mark.parametrize("finds_sockets", [False, True], ids=["kubelet-socket", "plugin-watcher"])
def test_a_new_kubelet_socket_restarts_servers_unless_the_kubelet_finds_them(
    finds_sockets: bool,
) -> None:
    """kubelet.sock re-created: restart_all (Register again), or nothing for the plugin watcher."""

    async def main() -> None:
        with short_tmpdir() as workdir:
            async with server_set(workdir) as (servers, registrar):
                registrar.kubelet_finds_sockets_at_start = finds_sockets
                kubelet = listen(servers.kubelet_socket)
                await servers.start(HPRE)
                ticks: list[None] = []
                watch = KubeletWatch(registrar.socket_dir, servers, lambda: ticks.append(None))
                task = asyncio.create_task(watch.run())
                try:
                    await until(lambda: len(ticks) == 1)
                    kubelet.close()
                    kubelet = listen(servers.kubelet_socket)  # a kubelet restart
                    await until(lambda: servers.counters.sample("kae_kubelet_restarts_total") == 1)
                    # The next tick comes after the check that counted the restart has ended.
                    await until(lambda: len(ticks) >= 2)
                    assert len(registrar.registered) == (1 if finds_sockets else 2)
                finally:
                    task.cancel()
                    kubelet.close()

    asyncio.run(main())


def test_a_swept_socket_of_ours_is_recreated_while_the_kubelet_answers() -> None:
    """Our socket removed while kubelet.sock stays live: that server restarts and registers."""

    async def main() -> None:
        with short_tmpdir() as workdir:
            async with server_set(workdir) as (servers, registrar):
                kubelet = listen(servers.kubelet_socket)
                await servers.start(HPRE)
                watch = KubeletWatch(registrar.socket_dir, servers, lambda: None)
                task = asyncio.create_task(watch.run())
                try:
                    servers.servers[HPRE].socket_path.unlink()
                    await until(lambda: len(registrar.registered) == 2)
                    assert servers.servers[HPRE].socket_intact()
                finally:
                    task.cancel()
                    kubelet.close()

    asyncio.run(main())


def test_a_vanished_kubelet_clears_registrations_and_waits() -> None:
    """kubelet.sock gone: nothing counts as registered, nothing is restarted."""

    async def main() -> None:
        with short_tmpdir() as workdir:
            async with server_set(workdir) as (servers, registrar):
                kubelet = listen(servers.kubelet_socket)
                await servers.start(HPRE)
                watch = KubeletWatch(registrar.socket_dir, servers, lambda: None)
                task = asyncio.create_task(watch.run())
                try:
                    kubelet.close()
                    servers.kubelet_socket.unlink()
                    await until(lambda: not servers.registered)
                    assert registrar.registered == [HPRE]
                finally:
                    task.cancel()

    asyncio.run(main())
