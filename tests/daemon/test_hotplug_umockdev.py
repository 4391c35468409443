"""Hotplug for real: umockdev uevents through the real netlink monitor, up to the kubelet emulator.

Each test runs a scenario of tests/support/umockdev_driver.py under ``umockdev-wrapper`` in a
subprocess (the preload must be in place when the interpreter starts) and asserts on the JSON it
prints.
Skipped only where umockdev is not installed (scripts/ci-install-umockdev.sh installs it); with
KAE_REQUIRE_UMOCKDEV=1, as CI sets it, a missing umockdev fails instead.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
FAST = 0.5  # s: "a fraction of a second"; the daemon's scan interval there is 60 s
EVENTS = 20


def _umockdev_missing() -> str | None:
    if shutil.which("umockdev-wrapper") is None:
        return "umockdev-wrapper is not installed (Debian package umockdev)"
    for library in ("libumockdev.so.0", "libumockdev-preload.so.0"):
        try:
            ctypes.CDLL(library)
        except OSError:
            return f"{library} cannot be loaded (Debian packages umockdev, libumockdev0)"
    return None


MISSING = _umockdev_missing()
if MISSING and os.environ.get("KAE_REQUIRE_UMOCKDEV") == "1":
    raise RuntimeError(f"KAE_REQUIRE_UMOCKDEV=1 but {MISSING}")
pytestmark = pytest.mark.skipif(
    MISSING is not None, reason=f"{MISSING}: run scripts/ci-install-umockdev.sh"
)


def run_scenario(*args: str) -> dict[str, Any]:
    wrapper = shutil.which("umockdev-wrapper")
    assert wrapper is not None
    done = subprocess.run(
        [wrapper, sys.executable, "-m", "tests.support.umockdev_driver", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, f"driver failed ({done.returncode}):\n{done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def report(capsys: pytest.CaptureFixture[str], what: str, result: dict[str, Any]) -> None:
    with capsys.disabled():
        print(
            f"\n{what}: median {result['median'] * 1000:.2f} ms, "
            f"max {result['max'] * 1000:.2f} ms over {len(result['latencies'])} events"
        )


@pytest.mark.parametrize("source", ["auto", "kernel", "udev"])
def test_testbed_uevents_reach_udev_task(source: str) -> None:
    """add, change and remove of a uacce device each set rescan_now, are counted and logged."""
    result = run_scenario("events", "--source", source)
    assert [(s["action"], s["rescan"]) for s in result["steps"]] == [
        ("add", True),
        ("change", True),
        ("remove", True),
    ]
    assert result["counted"] == {"add": 1.0, "change": 1.0, "remove": 1.0}
    assert result["task_running"]
    assert "INFO uevent add hisi_zip-4: rescanning" in result["log"]
    assert "INFO uevent remove hisi_zip-4: rescanning" in result["log"]
    assert not any(line.startswith("WARNING") for line in result["log"]), result["log"]


def test_event_to_rescan_latency(capsys: pytest.CaptureFixture[str]) -> None:
    """Each of 20 add/remove uevents sets rescan_now, every one within a fraction of a second."""
    result = run_scenario("latency", "--count", str(EVENTS))
    assert result["lost"] == 0, result["latencies"]
    assert len(result["latencies"]) == EVENTS
    assert result["max"] < FAST, result["latencies"]
    report(capsys, "udev event -> rescan_now", result)


def test_hotplug_reaches_the_kubelet_without_waiting_for_the_rescan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With a 60 s scan interval, added and removed devices reach ListAndWatch in < 0.5 s each."""
    result = run_scenario("daemon", "--count", str(EVENTS))
    assert result["registered"], "the resource present at start never registered"
    assert result["new_resource_latency"] is not None, "a new resource's device never appeared"
    assert result["new_resource_latency"] < FAST
    assert result["lost"] == 0, result["latencies"]
    assert len(result["latencies"]) == EVENTS
    assert result["max"] < FAST, result["latencies"]
    assert result["exit_code"] == 0
    report(capsys, "udev event -> ListAndWatch update", result)
