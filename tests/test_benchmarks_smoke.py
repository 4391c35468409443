"""The benchmark command still runs and prints every figure, with the floor plugin measured in the
same run beside the daemon (no timing checks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Every figure issue 8 asks for, by the stable key the benchmark gives it in every mode.
MODES = ("uevents", "ticks")
TREES = ("2p", "mid", "large")
DRA = ("2p", "mid")  # the trees the DRA driver idles on beside the device plugin
EXPECTED = (
    {
        "allocate_p50",
        "allocate_p99",
        "empty_rpc",
        "udev_event",
        "kubelet_restart",
        "cold_start",
        "scan_small",
        "scan_mid",
        "scan_large",
        "scan_growth",
        "listandwatch_build",
        "listandwatch_serialize",
    }
    | {f"health_change_{mode}" for mode in MODES}
    | {f"{kind}_{mode}_{tree}" for kind in ("rss", "idle_cpu") for mode in MODES for tree in TREES}
    | {
        f"{kind}_dra_{mode}_{tree}"
        for kind in ("rss", "idle_cpu")
        for mode in MODES
        for tree in DRA
    }
    | {
        f"scale_{case}_{metric}"
        for case in ("s1", "s2", "s3", "s4", "shared")
        for metric in (
            "full_scan",
            "lw_build",
            "lw_size",
            "allocate",
            *(f"{m}_{mode}" for m in ("tick", "idle_cpu", "rss") for mode in MODES),
        )
    }
)
TARGETED = {
    "allocate_p50",
    "allocate_p99",
    "udev_event",
    "kubelet_restart",
    *(f"health_change_{mode}" for mode in MODES),
}
RESIDENT = {
    f"{kind}_{mode}_{tree}" for kind in ("rss", "idle_cpu") for mode in MODES for tree in TREES
}
DRA_RESIDENT = {
    f"{kind}_dra_{mode}_{tree}" for kind in ("rss", "idle_cpu") for mode in MODES for tree in DRA
}


def run_smoke(out: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "benchmarks/run.py", "--smoke", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    document: dict[str, Any] = json.loads(out.read_text())
    return done, document


def test_smoke_run_prints_every_figure(tmp_path: Path) -> None:
    """`run.py --smoke` exits 0, prints the machine and one row per figure with its target,
    and writes the same figures to --json; a figure is measured or says why not (n/a ...)."""
    done, document = run_smoke(tmp_path / "bench.json")
    figures = {f["key"]: f for f in document["figures"]}
    assert set(figures) == EXPECTED, set(figures) ^ EXPECTED
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Machine: ")
    assert document["machine"]["cpu"] in lines[0]
    assert document["machine"]["python"] in lines[0]
    for key, figure in figures.items():
        rows = [line for line in lines if line.startswith(figure["label"] + " ")]
        assert len(rows) == 1, f"{key}: no single row labelled {figure['label']!r}"
        measured = figure["median"] is not None or figure["p99"] is not None
        assert measured or figure["note"].startswith("n/a"), figure
        if measured:
            assert figure["unit"] in rows[0], rows[0]
        if figure["target"]:
            assert figure["target"] in rows[0], rows[0]
    judged = {"scan_large"} | {
        f"{kind}_{mode}_{tree}"
        for mode in MODES
        for kind, tree in (("rss", "2p"), ("idle_cpu", "mid"), ("rss_dra", "2p"))
    }
    for key in TARGETED | judged:
        measured = figures[key]["median"] is not None or figures[key]["p99"] is not None
        assert figures[key]["target"] or not measured, f"{key} is printed without its target"
    assert figures["allocate_p50"]["ratio"] is not None
    assert figures["cold_start"]["ratio"] is not None
    for key in RESIDENT:
        if figures[key]["median"] is None:
            continue  # a mode this machine cannot run (n/a, checked above)
        assert "floor plugin" in figures[key]["reference"], f"{key} without the floor's figure"
        if key.startswith("rss"):
            assert figures[key]["ratio"] is not None, f"{key} without its ratio to the floor"
    for key in DRA_RESIDENT:  # the DRA driver, measured in the same window
        if figures[key]["median"] is None:
            continue
        reference = "floor plugin" if key.startswith("rss") else "device plugin"
        assert reference in figures[key]["reference"], f"{key} without its reference"
        assert figures[key]["ratio"] is not None or key.startswith("idle"), key
    assert "How cost grows" in done.stdout
    assert "At rest in both modes" in done.stdout
    table = done.stdout.split("At rest in both modes", 1)[1]
    for mode in ("uevents", "every tick"):
        assert f"idle CPU, {mode}" in table and f"RSS, {mode}" in table, table
    assert "DRA driver, " in table, table
