"""The real-cluster benchmark still runs against the cluster and gives every figure (one sample
each; no timing is checked)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.e2e.cluster import REPO, Cluster

EXPECTED = {
    "cluster_pod_start",
    "cluster_kubelet_restart_plugin_watcher",
    "cluster_kubelet_restart_kubelet_socket",
    "helm_install_to_capacity",
    "helm_upgrade_allocatable_gap",
    "cluster_dra_pod_start",
    "cluster_dra_slices_published",
    "cluster_dra_health_to_slice",
}


def test_cluster_benchmark_smoke_gives_every_figure(cluster: Cluster, tmp_path: Path) -> None:
    """`benchmarks/cluster.py --smoke` on the running cluster exits 0 and writes one measured
    figure per key, each with its samples; the pod-start row carries its ratio to the pod
    without a device."""
    out = tmp_path / "cluster.json"
    env = {
        **os.environ,
        "KUBECONFIG": cluster.kubeconfig,
        "KAE_E2E_KUBELET_ROOT": str(cluster.kubelet_root),
        "KAE_E2E_IMAGE": cluster.image,
        "KAE_E2E_NODE": cluster.node,
        "KAE_E2E_BIN": str(cluster.bin),
    }
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/cluster.py",
            "--smoke",
            "--json",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    figures: dict[str, dict[str, Any]] = {
        f["key"]: f for f in json.loads(out.read_text())["figures"]
    }
    assert set(figures) == EXPECTED, sorted(figures)
    for key, figure in figures.items():
        assert figure["median"] is not None and figure["samples"], (key, figure)
    pod_start = figures["cluster_pod_start"]
    assert pod_start["ratio"] is not None and pod_start["ratio"] > 0, pod_start
    assert "without a device" in pod_start["reference"], pod_start
