"""Staying true on bad days: each fault injected, the kubelet's view checked with deadlines."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.errors import SocketInUse, UnsafeSocketPath
from kae_deviceplugin.kubelet.sockets import prepare_socket_path
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_builder import (
    add_dev_node,
    add_device,
    remove_dev_node,
    remove_device,
    set_attribute,
)
from kae_deviceplugin.testing.sysfs_trees import TREES, kunpeng_pf, vf_of
from tests.support.harness import DEADLINE, running_node, short_tmpdir
from tests.support.observability_harness import wait_until

HPRE, SEC, ZIP = (f"openfuyao.com/kae.{e}" for e in ("hpre", "sec", "zip"))
FAST: dict[str, Any] = {"scan_interval": 0.1}


def test_isolate_flips_unhealthy_and_back() -> None:
    """isolate 1 -> Unhealthy; 0 again -> Healthy (NVIDIA never recovers; we do)."""
    with running_node(**FAST) as node:
        assert node.wait_registered()
        set_attribute(node.root, "hisi_sec2-0", "isolate", "1")
        assert node.wait_view(SEC, lambda v: v["0000:76:00.0"][0] == "Unhealthy")
        assert node.view(SEC)["0000:b6:00.0"][0] == "Healthy"
        set_attribute(node.root, "hisi_sec2-0", "isolate", "0")
        assert node.wait_view(SEC, lambda v: v["0000:76:00.0"][0] == "Healthy")


def test_engine_stopped_is_unhealthy() -> None:
    """dev_state -1 (engine stopped) -> Unhealthy."""
    with running_node(**FAST) as node:
        assert node.wait_registered()
        set_attribute(node.root, "hisi_zip-5", "dev_state", "-1")
        assert node.wait_view(ZIP, lambda v: v["0000:b5:00.0"][0] == "Unhealthy")


def test_missing_dev_node_is_unhealthy_until_it_returns() -> None:
    """/dev node removed -> Unhealthy; re-created -> Healthy."""
    with running_node(**FAST) as node:
        assert node.wait_registered()
        remove_dev_node(node.root, "hisi_hpre-2")
        assert node.wait_view(HPRE, lambda v: v["0000:79:00.0"][0] == "Unhealthy")
        add_dev_node(node.root, "hisi_hpre-2")
        assert node.wait_view(HPRE, lambda v: v["0000:79:00.0"][0] == "Healthy")


def test_flapping_within_one_check_sends_no_message() -> None:
    """Changes that cancel out between two scans produce no ListAndWatch message."""
    with running_node(scan_interval=30.0) as node:
        assert node.wait_registered()
        state = node.kubelet.state(SEC)
        assert state is not None
        before = state.messages
        for _ in range(5):
            set_attribute(node.root, "hisi_sec2-0", "isolate", "1")
            set_attribute(node.root, "hisi_sec2-0", "isolate", "0")
        set_attribute(node.root, "hisi_sec2-1", "isolate", "1")
        node.runner.rescan()
        assert node.wait_view(SEC, lambda v: v["0000:b6:00.0"][0] == "Unhealthy")
        state = node.kubelet.state(SEC)
        assert state is not None and state.messages == before + 1


def test_device_removed_and_vf_added() -> None:
    """Hotplug by rescan: a removed device leaves the list, a new VF joins it."""
    with running_node(**FAST) as node:
        assert node.wait_registered()
        remove_device(node.root, "hisi_hpre-3")
        assert node.wait_view(HPRE, lambda v: set(v) == {"0000:79:00.0"})
        pf = kunpeng_pf("hisi_hpre", 0, 2)
        add_device(node.root, vf_of(pf, 0, 40))
        assert node.wait_view(
            HPRE, lambda v: v.get("0000:79:00.1") == ("Healthy", (0,)) and len(v) == 2
        )


def test_kubelet_restarted_twice_in_a_row() -> None:
    """Two restarts back to back: every resource registered again, one server each.

    The watch may act on the second restart after the servers already registered with the
    second kubelet (it cannot tell a registration with the new kubelet from one with the old),
    and restart them once more: so the steady state is awaited, not read the moment the first
    registrations arrive."""
    with running_node() as node:
        assert node.wait_registered()
        first = len(node.kubelet.registrations)
        node.kubelet.restart()
        node.kubelet.restart()
        started = time.monotonic()
        assert node.wait_registered()
        elapsed = time.monotonic() - started
        assert len(node.kubelet.registrations) >= first + 3
        plugin_dir = node.daemon.settings.effective_device_plugin_dir
        server_set = node.daemon.front.server_set

        def settled() -> bool:
            sockets = sorted(p.name for p in plugin_dir.iterdir())
            return set(server_set.servers) == set(server_set.registered) == {
                HPRE,
                SEC,
                ZIP,
            } and sockets == ["kae-hpre.sock", "kae-sec.sock", "kae-zip.sock", "kubelet.sock"]

        assert wait_until(settled)
        assert node.wait_registered()
        print(f"re-registered {elapsed:.3f} s after the second restart")


def test_kubelet_comes_up_after_the_plugin() -> None:
    """A plugin started before the kubelet registers as soon as kubelet.sock appears."""
    with short_tmpdir() as workdir:
        from kae_deviceplugin.daemon.run import build_daemon
        from tests.support.harness import DaemonThread, settings_for

        TREES["kunpeng920-2p"].build(workdir / "node")
        settings = settings_for(workdir)
        runner = DaemonThread(build_daemon(settings, with_optional=False))
        runner.start()
        try:
            plugin_dir = settings.effective_device_plugin_dir
            deadline = time.monotonic() + DEADLINE
            while not (plugin_dir / "kae-zip.sock").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            with KubeletEmulator(plugin_dir) as kubelet:
                assert kubelet.wait_for(
                    lambda k: len(k.resources()) == 3 and all(k.resources().values()), DEADLINE
                )
        finally:
            assert runner.stop() == 0


def test_dropped_stream_is_registered_again() -> None:
    """The kubelet ends a stream but stays up: the plugin re-registers and streams again."""
    with running_node() as node:
        assert node.wait_registered()
        node.kubelet.drop_stream(ZIP)
        assert node.kubelet.wait_for(
            lambda k: [r.resource for r in k.registrations].count(ZIP) == 2, DEADLINE
        )
        assert node.wait_registered()


def test_own_socket_removed_triggers_restart() -> None:
    """Someone deletes our socket: the server is restarted on a new socket and re-registers."""
    with running_node() as node:
        assert node.wait_registered()
        (node.daemon.settings.effective_device_plugin_dir / "kae-sec.sock").unlink()
        assert node.kubelet.wait_for(
            lambda k: [r.resource for r in k.registrations].count(SEC) == 2, DEADLINE
        )
        assert (node.daemon.settings.effective_device_plugin_dir / "kae-sec.sock").exists()


def serve_process(workdir: Path, plugin_dir: Path) -> subprocess.Popen[str]:
    root = workdir / "node"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kae_deviceplugin",
            "serve",
            "--sysfs-root",
            str(root / "sys"),
            "--dev-root",
            str(root / "dev"),
            "--device-plugin-dir",
            str(plugin_dir),
            "--state-dir",
            str(workdir / "state"),
            "--metrics-address",
            "",
            "--nfd-features-file",
            "",
            "--registration",
            "kubelet-socket",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_sigterm_stops_cleanly_and_sigkill_leaves_a_stale_socket_that_is_reclaimed() -> None:
    """As a DaemonSet runs it: SIGKILL, restart over the stale sockets, SIGTERM exits 0 clean."""
    with short_tmpdir() as workdir:
        TREES["kunpeng920-2p"].build(workdir / "node")
        plugin_dir = workdir / "dp"
        with KubeletEmulator(plugin_dir) as kubelet:
            first = serve_process(workdir, plugin_dir)
            try:
                assert kubelet.wait_for(lambda k: len(k.registrations) >= 3, 20)
            finally:
                first.kill()
                first.communicate(timeout=10)  # reaps it and closes its output pipe
            assert (plugin_dir / "kae-hpre.sock").exists()  # stale, nobody serves it
            second = serve_process(workdir, plugin_dir)
            try:
                assert kubelet.wait_for(lambda k: len(k.registrations) >= 6, 20)
                assert kubelet.wait_for(
                    lambda k: (
                        all(k.resources().values())
                        and all(
                            (state := k.state(r)) is not None and not state.stream_ended
                            for r in k.resources()
                        )
                    ),
                    DEADLINE,
                )
                started = time.monotonic()
                second.send_signal(signal.SIGTERM)
                output, _ = second.communicate(timeout=10)
            finally:
                if second.poll() is None:
                    second.kill()
            assert second.returncode == 0, output
            assert time.monotonic() - started < 5
            assert sorted(os.listdir(plugin_dir)) == ["kubelet.sock"]
            assert "shutting down" in output


def test_socket_path_safety(tmp_path: Path) -> None:
    """A symlinked socket path is refused; a live socket is not stolen; a stale one is removed."""
    link = tmp_path / "link.sock"
    link.symlink_to(tmp_path / "elsewhere.sock")
    with pytest.raises(UnsafeSocketPath):
        prepare_socket_path(link)
    regular = tmp_path / "file.sock"
    regular.write_text("")
    with pytest.raises(UnsafeSocketPath):
        prepare_socket_path(regular)
    live_path = tmp_path / "live.sock"
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(live_path))
    live.listen()
    try:
        with pytest.raises(SocketInUse):
            prepare_socket_path(live_path)
    finally:
        live.close()
    prepare_socket_path(live_path)  # now stale: nobody accepts
    assert not live_path.exists()


def test_created_names_parses_inotify_events() -> None:
    """A re-created kubelet.sock is recognised from the event itself, whatever its inode."""
    import struct

    from kae_deviceplugin.discovery.entry_watch import IN_CREATE, IN_DELETE, IN_MOVED_TO
    from kae_deviceplugin.kubelet.dirwatch import created_names

    def event(mask: int, name: bytes) -> bytes:
        padded = name + b"\0" * (16 - len(name) % 16)
        return struct.pack("iIII", 1, mask, 0, len(padded)) + padded

    data = event(IN_DELETE, b"kubelet.sock") + event(IN_CREATE, b"kubelet.sock")
    data += event(IN_MOVED_TO, b"kae-sec.sock") + event(IN_DELETE, b"gone.sock")
    assert created_names(data) == {"kubelet.sock", "kae-sec.sock"}
    assert created_names(b"") == set()
