"""A persistent fault logs once, not once per tick (25,000 broken class/uacce entries); a
shortage of our own (out of file descriptors) is not taken for the node losing its devices."""

from __future__ import annotations

import errno
import logging
import os
import shutil

import pytest

from kae_deviceplugin.daemon.run import DevicePluginDaemon, build_daemon
from kae_deviceplugin.observability.events import MAX_LISTED
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_builder import add_class_link, set_attribute
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import DaemonThread, running_node, settings_for, short_tmpdir
from tests.support.observability_harness import wait_until

BROKEN = 25_000
TICKS = 5


def scans(daemon: DevicePluginDaemon) -> float:
    """How many scans the daemon has timed."""
    return daemon.counters.sample("kae_scan_duration_seconds_count")


def gauge(daemon: DevicePluginDaemon) -> float:
    """The daemon's count of discovery warnings in effect."""
    return daemon.counters.sample("kae_discovery_warnings")


def daemon_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.levelno == level and r.name.startswith("kae_deviceplugin")
    ]


def test_a_huge_broken_tree_logs_each_change_once_in_bounded_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """25,000 dangling hisi_* links from the start, several ticks: at most MAX_LISTED + 1
    warning lines in all (named ones and a count) and the gauge says 25,000; when the broken
    entries go at once, as few lines say so and no warning follows."""
    caplog.set_level(logging.INFO)
    with short_tmpdir() as workdir:
        root = workdir / "node"
        TREES["kunpeng920-2p"].build(root)
        class_dir = root / "sys" / "class" / "uacce"
        clean = class_dir.with_name("uacce.clean")
        shutil.copytree(class_dir, clean, symlinks=True)
        for n in range(BROKEN):
            add_class_link(root, f"hisi_zip-{1000 + n}", f"../../nowhere/{n}")
        settings = settings_for(workdir, scan_interval=0.05)
        kubelet = KubeletEmulator(settings.effective_device_plugin_dir, dial_timeout=5.0)
        kubelet.start()
        runner = DaemonThread(build_daemon(settings, with_optional=False))
        runner.start()
        try:
            assert wait_until(lambda: gauge(runner.daemon) == BROKEN), (
                f"gauge at {gauge(runner.daemon)}"
            )
            start = scans(runner.daemon)
            assert wait_until(lambda: scans(runner.daemon) >= start + TICKS, timeout=60)
            warnings = daemon_records(caplog, logging.WARNING)
            assert len(warnings) == MAX_LISTED + 1, f"{len(warnings)} warning lines"
            assert f"{BROKEN - MAX_LISTED} more" in warnings[-1].getMessage()
            before_clear = len(caplog.records)
            class_dir.rename(class_dir.with_name("uacce.broken"))  # the fault goes at once
            clean.rename(class_dir)
            assert wait_until(lambda: gauge(runner.daemon) == 0)
            start = scans(runner.daemon)
            assert wait_until(lambda: scans(runner.daemon) >= start + TICKS, timeout=60)
            cleared = [r for r in caplog.records[before_clear:] if "discovery" in r.getMessage()]
            assert len(cleared) == MAX_LISTED + 1
            assert len(daemon_records(caplog, logging.WARNING)) == len(warnings)
        finally:
            runner.stop()
            kubelet.stop()


def test_running_out_of_file_descriptors_keeps_the_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """EMFILE while listing class/uacce is our shortage, not the node's: no device is 'removed',
    the kubelet keeps seeing every device, and one warning says so; then scanning resumes."""
    with running_node(scan_interval=0.05) as node:
        assert node.wait_registered()
        class_dir = str(node.root / "sys" / "class" / "uacce")
        real_listdir = os.listdir
        calls = []

        def out_of_fds(path: str = ".") -> list[str]:
            if str(path) == class_dir:
                calls.append(path)
                raise OSError(errno.EMFILE, "Too many open files")
            return real_listdir(path)

        monkeypatch.setattr(os, "listdir", out_of_fds)
        node.daemon.call_threadsafe(node.daemon.scan.scanner.invalidate)  # a full pass lists again
        node.daemon.call_threadsafe(node.daemon.scan.rescan_now.set)
        assert wait_until(lambda: len(calls) >= 3), "the class directory was not listed again"
        assert all(len(node.view(r)) == 2 for r in node.kubelet.resources())
        assert len(node.daemon.inventory) == 6
        monkeypatch.setattr(os, "listdir", real_listdir)
        set_attribute(node.root, "hisi_sec2-0", "isolate", "1")
        assert node.wait_view(
            "openfuyao.com/kae.sec", lambda v: v["0000:76:00.0"][0] == "Unhealthy"
        )
