"""Ours against the Go peers when pods come at once (issue 41): 1, 10 and 50 pods posted back to
back, each holding one HPRE through a claim from a template or through ``limits:``.

All four drivers serve a generated tree with enough HPREs for the largest burst (the 384-device
tree: 128 HPREs, PFs and VFs), each its own copy. Per burst size and kind this gives each pod's
create to Running (median and p99 over every pod of that size and kind) and the latency the
kubelet itself saw for the driver's calls: its ``dra_grpc_operations_duration_seconds``
(NodePrepareResources, per driver) and ``kubelet_device_plugin_alloc_duration_seconds`` (per
resource), read before and after each burst from the kubelet's own metrics endpoint. Their mean
is exact (sum over count); their p99 is only a bucket's bound, as the kubelet's buckets are
coarse (DRA's first is 100 ms), so the per-pod p99 is the figure with a goal.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench_cluster import running
from bench_core import Figure, median, p99
from bench_go_peers import (
    CLAIMS,
    GO_DRIVER,
    GO_PREFIX,
    KINDS,
    PODS,
    TIMEOUT,
    _manifest,
    four_drivers,
)
from kube_watch import KubeApi, Watch
from kubelet_metrics import Histogram, KubeletMetrics

from kae_deviceplugin.testing.sysfs_builder import build_tree
from kae_deviceplugin.testing.sysfs_trees import large_tree
from tests.e2e.cluster import Cluster, FixtureTree, wait_until
from tests.e2e.dra import DRIVER

DEVICES = 384  # 128 HPREs: room for the largest burst of each kind at once
SIZES = (1, 10, 50)
PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"


def generated_tree(root: Path) -> FixtureTree:
    """The DEVICES tree under ``root``, its dev/ entries made real character devices (the
    runtime creates a container's device nodes from them)."""
    build_tree(root, large_tree(DEVICES))
    tree = FixtureTree(root)
    for node in sorted(tree.dev.iterdir()):
        major, minor = tree.major_minor(node.name)
        node.unlink()
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    return tree


def _driver_call(kind: str) -> tuple[str, dict[str, str]]:
    """The kubelet histogram that times ``kind``'s driver call, and its labels."""
    ours = kind.endswith("ours")
    if kind.startswith("claim"):
        labels = {"driver_name": DRIVER if ours else GO_DRIVER, "method_name": PREPARE}
        return "dra_grpc_operations_duration_seconds", labels
    resource = ("openfuyao.com/kae." if ours else GO_PREFIX) + "hpre"
    return "kubelet_device_plugin_alloc_duration_seconds", {"resource_name": resource}


@dataclass
class Sized:
    """What one burst size gave each kind: pod starts, and the kubelet's calls summed."""

    starts: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    calls: dict[str, Histogram] = field(default_factory=dict)


def _burst(
    cluster: Cluster, api: KubeApi, pods: Watch, kind: str, names: Sequence[str]
) -> list[float]:
    """Post every pod back to back; each one's create to Running; then all deleted and gone."""
    posted: dict[str, float] = {}
    for name in names:
        posted[name] = time.monotonic()
        api.request("POST", PODS, _manifest(cluster, kind, name))
    started: dict[str, float] = {}
    deadline = time.monotonic() + TIMEOUT
    while len(started) < len(names):
        at, _, pod = pods.next(deadline)
        name = pod["metadata"]["name"]
        if name in posted and name not in started and running(pod):
            started[name] = at - posted[name]
    for name in names:
        api.request("DELETE", f"{PODS}/{name}", {"gracePeriodSeconds": 0})
    gone: set[str] = set()
    while len(gone) < len(names):
        _, event, pod = pods.next(time.monotonic() + TIMEOUT)
        if event == "DELETED":
            gone.add(pod["metadata"]["name"])
    return [started[n] for n in names]


def _settled(api: KubeApi, metrics: KubeletMetrics) -> None:
    """No claim left in the API, and the kubelet holds none prepared: the next burst starts on
    a node at rest, not beside the last one's unprepares."""
    wait_until(
        "the claims gone", lambda: not api.request("GET", CLAIMS).get("items") or None, TIMEOUT
    )
    wait_until(
        "the kubelet's claims unprepared", lambda: metrics.claims_in_use() == 0 or None, TIMEOUT
    )


def bursts(cluster: Cluster, api: KubeApi, work: Path, rounds: int) -> list[Figure]:
    """``rounds`` bursts of each size and kind, kinds rotated round by round."""
    room = int(cluster.get("node", cluster.node)["status"]["allocatable"]["pods"])
    if room < SIZES[-1] + 5:
        raise RuntimeError(
            f"the node takes {room} pods, a burst needs {SIZES[-1]} and the cluster's own: "
            "start the cluster with KAE_E2E_MAX_PODS=70 scripts/cluster/up"
        )
    metrics = KubeletMetrics.of(cluster)
    results = {size: Sized() for size in SIZES}
    selector = f"{PODS}?labelSelector=kae-bench%3Dpod-start"
    with four_drivers(cluster, work, generated_tree), Watch(api, selector) as pods:
        for r in range(rounds):
            for size in SIZES:
                for kind in KINDS[r % 4 :] + KINDS[: r % 4]:
                    name, labels = _driver_call(kind)
                    before = metrics.histogram(name, labels)
                    names = [f"burst-{size}-{kind}-{r}-{j}" for j in range(size)]
                    results[size].starts[kind] += _burst(cluster, api, pods, kind, names)
                    _settled(api, metrics)
                    calls = metrics.histogram(name, labels) - before
                    sized = results[size].calls
                    sized[kind] = sized[kind] + calls if kind in sized else calls
    return [fig for size in SIZES for fig in _figures(size, results[size], rounds)]


def _figures(size: int, sized: Sized, rounds: int) -> list[Figure]:
    rows = []
    for how, call in (("claim", "prepare"), ("limits", "Allocate")):
        holding = "a claim" if how == "claim" else "limits:"
        goal = size == SIZES[-1] and how == "claim"
        ours, go = sized.starts[f"{how}-ours"], sized.starts[f"{how}-go"]
        mine, theirs = sized.calls[f"{how}-ours"], sized.calls[f"{how}-go"]
        rows.append(
            Figure(
                key=f"go_peer_burst_{size}_{how}",
                label=f"{size} pods at once with {holding}, ours",
                unit="s",
                median=median(ours),
                p99=p99(ours),
                ratio=p99(ours) / p99(go),
                reference=(
                    f"Go p50 {median(go):.3f} s p99 {p99(go):.3f}; kubelet-seen {call} mean "
                    f"ours {mine.mean() * 1000:.1f} ms (p99 <= {mine.bound(0.99) * 1000:g}), "
                    f"Go {theirs.mean() * 1000:.1f} ms (p99 <= {theirs.bound(0.99) * 1000:g})"
                ),
                target="p99 <= 1.0x" if goal else "",
                met=p99(ours) <= p99(go) if goal else None,
                note=f"create to Running, {rounds} bursts of {size} per kind; ratio of p99s",
                samples=ours,
            )
        )
    return rows
