"""Figures from the real single-node cluster: pod start with and without a KAE device, and the
real kubelet's restart to the node's allocatable restored, in both registration modes.

The plugin runs as a host process on a copy of the 2-socket fixture tree, as in the e2e tests
(``tests/e2e/cluster.py`` prepares both). Times come from API watches (``kube_watch``), stamped as
each event arrives, so they include what an operator waits for: the kubelet's status updates,
which this cluster sends every second (``nodeStatusUpdateFrequency: 1s``) and, for pods, after
the kubelet's 1 s relist of containers sees the change.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_core import Figure, median, p99
from kube_watch import KubeApi, Watch

from tests.e2e.cluster import CLUSTER_SCRIPTS, PREFIX, Cluster, FixtureTree, Plugin, make_plugin
from tests.e2e.pods import manifest

NAMESPACE = "default"
BENCH_LABEL = "kae-bench"
TREE = "kunpeng920-2p"


def pod_manifest(cluster: Cluster, name: str, limits: dict[str, int]) -> dict[str, Any]:
    """The smallest pod that runs: a shell that sleeps, host network (no CNI in the figure)."""
    return manifest(
        cluster, name, limits, script="exec sleep 3600", labels={BENCH_LABEL: "pod-start"}
    )


def running(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses", [])
    return bool(statuses) and all("running" in s.get("state", {}) for s in statuses)


def start_one(api: KubeApi, watch: Watch, manifest: dict[str, Any], timeout: float) -> float:
    """Create the pod, wait for its container to run, delete it and wait until it is gone.
    Returns create-to-Running in seconds."""
    name = manifest["metadata"]["name"]
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    created = time.monotonic()
    api.request("POST", pods, manifest)
    deadline = created + timeout
    started: float | None = None
    while started is None:
        at, _, pod = watch.next(deadline)
        if pod["metadata"]["name"] == name and running(pod):
            started = at
    api.request("DELETE", f"{pods}/{name}", {"gracePeriodSeconds": 0})
    while True:
        _, kind, pod = watch.next(time.monotonic() + timeout)
        if pod["metadata"]["name"] == name and kind == "DELETED":
            return started - created


def pod_start(cluster: Cluster, api: KubeApi, samples: int, timeout: float = 120.0) -> Figure:
    """Median create-to-Running of a pod with one kae.hpre against the same pod without it,
    interleaved and in alternating order so both see the same noise."""
    with_device: list[float] = []
    without: list[float] = []
    selector = f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={BENCH_LABEL}%3Dpod-start"
    with Watch(api, selector) as watch:
        for i in range(samples):
            pair = [(True, with_device), (False, without)]
            for device, into in pair if i % 2 == 0 else reversed(pair):
                name = f"bench-{'kae' if device else 'plain'}-{i}"
                limits = {"hpre": 1} if device else {}
                into.append(start_one(api, watch, pod_manifest(cluster, name, limits), timeout))
    ratio = median(with_device) / median(without)
    return Figure(
        key="cluster_pod_start",
        label=f"pod start with one KAE device, real cluster ({samples} pods each)",
        unit="s",
        median=median(with_device),
        p99=p99(with_device),
        ratio=ratio,
        reference=f"the same pod without a device {median(without):.3f} s (p99 {p99(without):.3f})",
        target="<= 1.1x",
        met=ratio <= 1.1,
        note="create to container running, through an API watch; host network",
        samples=with_device,
    )


def allocatable(node: dict[str, Any]) -> dict[str, int]:
    section = node.get("status", {}).get("allocatable", {})
    return {e: int(section.get(PREFIX + e, "0")) for e in ("hpre", "sec", "zip")}


def one_restart(
    api: KubeApi, cluster: Cluster, healthy: dict[str, int], settle: float
) -> tuple[float, int]:
    """Restart the real kubelet; return (seconds from the new kubelet's start to the first node
    status of the final run in which allocatable is whole, times allocatable fell below whole).

    Only statuses posted after the restart count. The window closes once allocatable has stayed
    whole for ``settle`` seconds, so a second fall (a plugin watcher re-registering a socket the
    plugin re-created) lands in it. With no fall at all, the figure is the new kubelet's first
    status: what it took to start and post it, with the plugin already back.
    """
    path = f"/api/v1/nodes?fieldSelector=metadata.name%3D{cluster.node}"
    with Watch(api, path) as watch:
        subprocess.run([str(CLUSTER_SCRIPTS / "restart-kubelet")], check=True, timeout=120)
        restarted = time.monotonic()
        deadline = restarted + 120.0
        whole_since: float | None = None
        falls, last_whole = 0, True
        timeline: list[str] = []
        while whole_since is None or time.monotonic() < whole_since + settle or not last_whole:
            wait = deadline if whole_since is None else min(deadline, whole_since + settle)
            try:
                at, _, node = watch.next(wait)
            except TimeoutError:
                if whole_since is None or not last_whole:
                    raise
                break
            if at < restarted:
                continue  # the status the old kubelet left
            seen = allocatable(node)
            whole = seen == healthy
            if whole != last_whole or not timeline:
                timeline.append(f"+{at - restarted:.2f}s {seen}")
            if whole and (whole_since is None or not last_whole):
                whole_since = at
            elif not whole and last_whole:
                falls += 1
            last_whole = whole
        if falls:
            print(f"  allocatable after the restart: {', '.join(timeline)}", file=sys.stderr)
        return whole_since - restarted, falls


@contextmanager
def served_plugin(
    cluster: Cluster,
    workdir: Path,
    registration: str,
    tree: FixtureTree | None = None,
    extra: Sequence[str] = (),
) -> Iterator[tuple[Plugin, FixtureTree]]:
    """A host-process plugin on ``tree`` (else a fresh copy of the 2-socket tree), ready and
    visible on the node."""
    workdir.mkdir(parents=True, exist_ok=True)
    tree = tree or FixtureTree.copy(TREE, workdir)
    plugin = make_plugin(
        cluster, tree, workdir, registration, extra=["--log-level", "info", *extra]
    )
    plugin.start()
    try:
        plugin.wait_ready()
        cluster.wait_resources(allocatable=tree.counts(healthy_only=True))
        yield plugin, tree
    finally:
        plugin.stop()
        cluster.wait_resources(allocatable={"hpre": 0, "sec": 0, "zip": 0}, timeout=120)


def kubelet_restart(
    cluster: Cluster,
    api: KubeApi,
    workdir: Path,
    registration: str,
    *,
    restarts: int,
    settle: float,
) -> Figure:
    """The real kubelet restarted ``restarts`` times under one plugin in ``registration`` mode."""
    times: list[float] = []
    falls: list[int] = []
    with served_plugin(cluster, workdir / registration, registration) as (_, tree):
        counts = tree.counts(healthy_only=True)
        for _ in range(restarts):
            seconds, fell = one_restart(api, cluster, counts, settle)
            times.append(seconds)
            falls.append(fell)
    return Figure(
        key=f"cluster_kubelet_restart_{registration.replace('-', '_')}",
        label=f"real kubelet restart to allocatable restored, {registration} ({restarts} restarts)",
        unit="s",
        median=median(times),
        p99=p99(times),
        note=(
            f"allocatable fell below whole {sum(falls)} times in {restarts} restarts "
            f"(per restart: {falls}); window closes after {settle:.0f} s whole; "
            "node status every 1 s"
        ),
        samples=times,
    )
