"""Small things an operator notices: error lines, start-up logs, what the demo prints."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kae_deviceplugin.cli.main import main
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.observability.events import log_inventory_changes
from tests.support.harness import DEADLINE, short_tmpdir

FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"


def test_list_allocations_failure_reads_as_words_not_urlopen_repr(tmp_path: Path) -> None:
    """No daemon: the line says nothing answers and why, without urllib's <urlopen error ...>."""
    args = ["list", "--allocations", "--endpoint", "http://127.0.0.1:1"]
    result = CliRunner().invoke(main, [*args, "--pod-resources-socket", str(tmp_path / "x.sock")])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "urlopen" not in lines[0] and "<" not in lines[0]
    assert "http://127.0.0.1:1/allocations: no daemon answers (connection refused)" in lines[0]


def test_devices_unhealthy_at_start_are_logged_with_their_reasons(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first inventory logs each Unhealthy device as a warning naming its reasons."""
    inventory = scan(FIXTURES / "faults" / "sys", FIXTURES / "faults" / "dev")
    with caplog.at_level(logging.INFO, logger="kae_deviceplugin.devices"):
        log_inventory_changes(Inventory(), inventory)
    lines = {r.getMessage().split(" at ")[0].split()[-1]: r for r in caplog.records}
    for device in inventory:
        record = lines[device.name]
        if device.healthy:
            assert record.levelno == logging.INFO
        else:
            assert record.levelno == logging.WARNING
            assert all(reason in record.getMessage() for reason in device.reasons)
    assert "NUMA unknown" in lines["hisi_zip-5"].getMessage()


def test_demo_explains_capacity_and_prints_no_path_that_vanishes() -> None:
    """The demo says what capacity and allocatable mean, and names its temporary directory
    rather than printing host paths that are deleted when it exits."""
    result = CliRunner().invoke(main, ["demo", "--tree", "kunpeng920-2p"])
    assert result.exit_code == 0, result.output
    assert "allocatable: the Healthy ones" in result.stdout
    assert "<demo dir>/state/uacce-class -> /sys/class/uacce" in result.stdout
    assert "/tmp/kae-demo" not in result.stdout
    assert "removed now" in result.stdout.splitlines()[-1]


def first_log_line(process: subprocess.Popen[str], needle: str) -> str:
    assert process.stderr is not None
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stderr], [], [], 0.2)
        if ready:
            line = process.stderr.readline()
            if needle in line:
                return line
            if not line:
                break
    raise AssertionError(f"no log line with {needle!r}")


def start_up_line(workdir: Path, registration: str) -> str:
    """serve's start-up log line on the fixture tree, with metrics and NFD turned off by empty
    variables; the process is stopped again."""
    env = {
        **os.environ,
        "KAE_DP_SYSFS_ROOT": str(FIXTURES / "kunpeng920-2p" / "sys"),
        "KAE_DP_DEV_ROOT": str(FIXTURES / "kunpeng920-2p" / "dev"),
        "KAE_DP_KUBELET_ROOT": str(workdir / "kubelet"),
        "KAE_DP_STATE_DIR": str(workdir / "state"),
        "KAE_DP_REGISTRATION": registration,
        "KAE_DP_METRICS_ADDRESS": "",
        "KAE_DP_NFD_FEATURES_FILE": "",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "kae_deviceplugin", "serve"],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=FIXTURES.parent,
    )
    try:
        return first_log_line(process, "starting")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=DEADLINE)  # reaps it and closes its pipe


def test_plugin_watcher_start_up_names_the_plugins_registry_directory() -> None:
    """In plugin-watcher mode the sockets go to plugins_registry, and the start-up line says so."""
    with short_tmpdir() as workdir:
        (workdir / "kubelet" / "plugins_registry").mkdir(parents=True)
        (workdir / "kubelet" / "device-plugins").mkdir()
        line = start_up_line(workdir, "plugin-watcher")
        assert f"plugin sockets in {workdir / 'kubelet' / 'plugins_registry'}" in line
        assert "registration: plugin watcher" in line
        assert "device-plugins" not in line


def test_an_empty_metrics_variable_turns_the_endpoint_off_even_with_its_port_taken() -> None:
    """KAE_DP_METRICS_ADDRESS="" (which click alone would take for unset) turns the endpoint
    off: with the default port held by another socket, serve still starts."""
    with short_tmpdir() as workdir, socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError):  # already taken by someone else: as good
            holder.bind(("", 9410))
            holder.listen()
        (workdir / "kubelet" / "device-plugins").mkdir(parents=True)
        assert "starting" in start_up_line(workdir, "kubelet-socket")
