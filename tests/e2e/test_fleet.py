"""The fleet benchmark's smoke mode runs against the real API server: it prints every figure,
writes nothing at rest, and leaves no synthetic node or slice behind (no timing is checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import REPO, Cluster

pytestmark = pytest.mark.needs("dra")

NODES = 3  # the smoke fleet
METRICS = (
    "start_writes",
    "start_reads",
    "start_sent",
    "start_received",
    "start_time",
    "slices",
    "client_rss",
    "start_cpu_api",
    "start_cpu_etcd",
    "rest_writes",
    "rest_requests",
    "rest_cpu_api",
    "rest_cpu_etcd",
    *(
        f"{kind}_{m}"
        for kind in ("flip_taint", "flip_removal", "hotplug")
        for m in ("writes", "sent")
    ),
    "change_latency",
    "flap_free",
    "flap_limited",
)


def test_fleet_smoke_prints_every_figure_and_writes_nothing_at_rest(
    cluster: Cluster, tmp_path: Path
) -> None:
    """`benchmarks/fleet.py --smoke` exits 0, prints a row per figure and the extrapolation,
    measures zero writes at rest and one slice per node, and deletes its nodes and slices."""
    out = tmp_path / "fleet.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/fleet.py", "--smoke", "--json", str(out)],
        cwd=REPO,
        env={**os.environ, "KUBECONFIG": cluster.kubeconfig},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    document = json.loads(out.read_text())
    figures: dict[str, dict[str, Any]] = {f["key"]: f for f in document["figures"]}
    expected = {f"fleet{NODES}_{m}" for m in METRICS}
    assert expected <= set(figures), sorted(expected - set(figures))
    lines = done.stdout.splitlines()
    for key in expected:
        label = figures[key]["label"]
        assert any(line.startswith(label) for line in lines), f"no row for {key}: {label!r}"
    assert figures[f"fleet{NODES}_rest_writes"]["median"] == 0, figures[f"fleet{NODES}_rest_writes"]
    assert figures[f"fleet{NODES}_slices"]["median"] == 1
    assert figures[f"fleet{NODES}_start_writes"]["median"] == 1
    assert "Extrapolated from" in done.stdout
    assert document["deleted_nodes"] == [NODES]
    names = [n["metadata"]["name"] for n in cluster.get("nodes")["items"]]
    assert not [n for n in names if n.startswith("kae-fleet-")], names
    left = cluster.get("resourceslices", "--field-selector=spec.driver=kae-fleet.invalid")
    assert left["items"] == [], [s["metadata"]["name"] for s in left["items"]]
