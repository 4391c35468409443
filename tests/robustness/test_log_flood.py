"""A persistent fault logs once, not once per tick: 25,000 broken class/uacce entries."""

from __future__ import annotations

import logging
import shutil

import pytest

from kae_deviceplugin.daemon.supervisor import Daemon
from kae_deviceplugin.observability.events import MAX_LISTED
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_builder import add_class_link
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import DaemonThread, settings_for, short_tmpdir
from tests.support.observability_harness import wait_until

BROKEN = 25_000
TICKS = 5


def scans(daemon: Daemon) -> float:
    """How many scans the daemon has timed."""
    return daemon.counters.sample("kae_scan_duration_seconds_count")


def gauge(daemon: Daemon) -> float:
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
        runner = DaemonThread(Daemon(settings))
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
