"""The scheduling benchmark's smoke mode runs its own control plane (the cached 1.37.2 binaries,
not the e2e cluster), binds every pod of every workload and leaves no process or directory
behind (no timing is checked)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.e2e.cluster import REPO

KEYS = ("dp_ext", "dra_ext", "claim_alg", "claim_alg_min", "claim_alg_before", "claim_numa",
        "claim_numa_min", "claim_numa_before")  # fmt: skip


def _plane_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sched_plane", REPO / "benchmarks/sched_plane.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sched_plane", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _processes_in(state: str) -> list[str]:
    """Command lines of processes that name ``state`` (the components are started with paths
    in their state directory)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state in text:
            found.append(text[:200])
    return found


def test_sched_smoke_binds_every_pod_and_leaves_nothing(tmp_path: Path) -> None:
    """`benchmarks/sched.py --smoke` exits 0, prints a rate, a latency and the scheduler's time
    for every workload with every pod bound and every claim check passed, and stops its control
    plane and removes its state directory."""
    try:
        binaries = _plane_module().find_bin()
    except FileNotFoundError as err:
        pytest.skip(f"needs the 1.37.2 binaries scripts/cluster/build makes: {err}")
    out = tmp_path / "sched.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/sched.py", "--smoke", "--bin", str(binaries),
         "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    document = json.loads(out.read_text())
    figures = {f["key"]: f for f in document["figures"]}
    for key in KEYS:
        for suffix in ("rate", "latency", "algorithm"):
            assert figures[f"{key}_{suffix}"]["median"] is not None, f"{key}_{suffix}"
    for run in document["runs"]:
        assert run["bound"] == run["pods"], run
        assert not run["checks"], run
    assert figures["claim_alg_rate"]["target"] and figures["claim_numa_rate"]["target"]
    state = document["machine"]["state_dir"]
    assert not Path(state).exists(), f"{state} left behind"
    assert not _processes_in(state), "control-plane processes left behind"
