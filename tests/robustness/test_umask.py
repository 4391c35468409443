"""Sockets and files get explicit modes; the process-wide umask is never touched.

Changing the umask to create one socket privately would give every file another thread
creates meanwhile (a log file, the NFD file, a CDI spec) that umask too.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

import pytest

from tests.support.harness import running_node

SOCKETS = ("kae-hpre.sock", "kae-sec.sock", "kae-zip.sock")


@pytest.fixture
def umask_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every os.umask call made while the test runs (the call still happens)."""
    calls: list[int] = []
    real = os.umask

    def recording(mask: int) -> int:
        calls.append(mask)
        return real(mask)

    monkeypatch.setattr(os, "umask", recording)
    yield calls


def test_starting_and_restarting_servers_never_changes_the_umask(umask_calls: list[int]) -> None:
    """Three servers started, then restarted by five kubelet restarts: no os.umask call, and
    each socket is 0600 in its place."""
    with running_node() as node:
        assert node.wait_registered()
        for _ in range(5):
            node.kubelet.restart()
            assert node.wait_registered()
        plugin_dir = node.daemon.settings.effective_device_plugin_dir
        for name in SOCKETS:
            mode = os.lstat(plugin_dir / name).st_mode
            assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600, name
        assert not [p for p in plugin_dir.iterdir() if p.name.startswith(".kae-")]
    assert umask_calls == []


def test_sockets_are_private_even_under_an_open_umask() -> None:
    """With the process umask 000 the sockets are still 0600, and no other file the daemon
    made in the socket directory is left behind."""
    old = os.umask(0)
    try:
        with running_node() as node:
            assert node.wait_registered()
            plugin_dir = node.daemon.settings.effective_device_plugin_dir
            modes = {p.name: stat.S_IMODE(os.lstat(p).st_mode) for p in plugin_dir.iterdir()}
            assert {n: modes[n] for n in SOCKETS} == dict.fromkeys(SOCKETS, 0o600)
    finally:
        os.umask(old)
