"""udev event to ListAndWatch update: umockdev's synthetic uevents, the real netlink monitor.

Reuses the ``daemon`` scenario of ``tests/support/umockdev_driver.py`` (the hotplug tests'
driver): the whole daemon with its udev task and a 60 s scan interval, so only the uevent can
explain a fast update. It has to run under ``umockdev-wrapper`` (the preload must be there
when the interpreter starts), hence a subprocess.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench_core import Figure, median, p99
from bench_mode import UEVENTS, missing

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "tests" / "support" / "umockdev_driver.py"
TARGET = 0.2


def umockdev_missing() -> str | None:
    """Why the figure cannot be measured here, or None."""
    why = missing(UEVENTS)
    if why is None and not DRIVER.exists():
        return "n/a (tests/support/umockdev_driver.py not found)"
    return why


def _not_measured(note: str) -> Figure:
    return Figure(
        key="udev_event",
        label="udev event -> ListAndWatch",
        unit="s",
        median=None,
        target=f"<= {TARGET:g} s",
        note=note,
    )


def run_driver(events: int, timeout: float) -> dict[str, Any]:
    wrapper = shutil.which("umockdev-wrapper")
    assert wrapper is not None
    driver = ["-m", "tests.support.umockdev_driver", "daemon", "--count", str(events)]
    done = subprocess.run(
        [wrapper, sys.executable, *driver],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(f"umockdev driver exited {done.returncode}: {last}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def udev_event(events: int) -> Figure:
    """Median over ``events`` add/remove uevents; lost events (no update in 5 s) are counted."""
    missing = umockdev_missing()
    if missing is not None:
        return _not_measured(missing)
    try:
        # Each lost event costs the driver's 5 s deadline; allow for all of them, plus start-up.
        result = run_driver(events, timeout=60 + 6 * (events + 1))
    except (RuntimeError, subprocess.TimeoutExpired, ValueError, IndexError) as err:
        return _not_measured(f"n/a ({err})")
    latencies = [x for x in result["latencies"] if x is not None]
    lost = int(result["lost"])
    note = f"lost {lost} of {events} events (no update within 5 s)" if lost else ""
    if result.get("new_resource_latency") is None:
        note = "; ".join(filter(None, [note, "a new resource's device never appeared"]))
    if not latencies:
        return _not_measured(f"n/a: every event lost ({note})")
    mid = median(latencies)
    return Figure(
        key="udev_event",
        label=f"udev event -> ListAndWatch ({events} events)",
        unit="s",
        median=mid,
        p99=p99(latencies),
        reference="scan interval 60 s: only the uevent explains an update",
        target=f"<= {TARGET:g} s",
        met=mid <= TARGET and lost == 0,
        note=note,
        samples=latencies,
    )
