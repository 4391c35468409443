"""The chart on the real e2e cluster (scripts/cluster/up): `helm install` until the node shows the
devices, and the window of a `helm upgrade` to a new image tag in which the node has fewer
allocatable devices than healthy ones.

Needs a running cluster named by up's exports (KUBECONFIG, KAE_E2E_*), root, Helm 3 and the
plugin image (scripts/cluster/plugin-image builds it when missing). Every release it installs is
uninstalled again, in a namespace of its own.

    eval "$(scripts/cluster/up)"; .venv/bin/python benchmarks/bench_helm.py
"""

from __future__ import annotations

import json
import os
import queue
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_cluster import allocatable
from bench_core import Figure, machine, median, render
from kube_watch import KubeApi, Watch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the e2e tests' cluster and chart helpers, shared

from tests.deploy.test_deploy import _helm  # noqa: E402
from tests.e2e.cluster import Cluster, FixtureTree, wait_until  # noqa: E402
from tests.e2e.helm import Ctr, Release, build_plugin_image, chart_values, split_image  # noqa: E402

TREE = "kunpeng920-2p"
NAMESPACE = "kae-bench"
RUNS = 3
DEADLINE = 180.0


@dataclass
class Setup:
    """What every run shares: the release, the values it installs with, the tree and image."""

    cluster: Cluster
    release: Release
    values: Path
    tree: FixtureTree
    image: str
    ctr: Ctr


@contextmanager
def prepared(cluster: Cluster) -> Iterator[Setup]:
    """The image imported, a fixture tree and values in a temp dir; the namespace removed at the
    end, with the release if one is left."""
    helm = _helm()
    if helm is None:
        raise SystemExit("bench_helm: Helm 3 is missing (scripts/install-helm.sh)")
    ctr = Ctr(cluster)
    image = ctr.import_archive(build_plugin_image())
    with tempfile.TemporaryDirectory(prefix="kae-bench-helm-") as tmp:
        base = Path(tmp)
        tree = FixtureTree.copy(TREE, base)
        values = base / "values.json"
        values.write_text(json.dumps(chart_values(cluster, tree, image, base / "host")))
        release = Release(helm, cluster, "kae", NAMESPACE)
        try:
            yield Setup(cluster, release, values, tree, image, ctr)
        finally:
            release.uninstall()
            cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found")


def _uninstall_and_settle(setup: Setup) -> None:
    """Uninstall; wait until the plugin pod is gone and the node has no allocatable devices."""
    setup.release.uninstall()
    wait_until("plugin pods gone", lambda: not setup.release.pods(terminating=True), DEADLINE)
    setup.cluster.wait_resources(allocatable={"hpre": 0, "sec": 0, "zip": 0}, timeout=DEADLINE)


def install_to_capacity(setup: Setup, runs: int = RUNS) -> Figure:
    """Seconds from `helm install` to the node's capacity and allocatable of every KAE resource
    equal to the tree's devices, as read through the API (polled every 50 ms)."""
    wanted = setup.tree.counts()
    samples: list[float] = []
    for _ in range(runs):
        started = time.monotonic()
        setup.release.install(setup.values)
        wait_until(
            "node capacity and allocatable",
            lambda: setup.cluster.node_resources() == (wanted, wanted),
            DEADLINE,
            interval=0.05,
        )
        samples.append(time.monotonic() - started)
        _uninstall_and_settle(setup)
    return Figure(
        key="helm_install_to_capacity",
        label=f"helm install -> node capacity of every kae resource ({runs} installs)",
        unit="s",
        median=median(samples),
        note=(
            "image already in containerd; the kubelet reports node status every 1 s; after the "
            "first install the kubelet still lists the resources (capacity stays, allocatable 0)"
        ),
        samples=samples,
    )


@dataclass
class NodeWatch:
    """The receive time and KAE allocatable of every update of the node, from an API watch."""

    cluster: Cluster
    updates: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    _watch: Watch | None = None

    def start(self) -> None:
        api = KubeApi.from_kubeconfig(self.cluster.kubeconfig)
        path = f"/api/v1/nodes?fieldSelector=metadata.name%3D{self.cluster.node}"
        self._watch = Watch(api, path).start()

    def seen(self) -> list[tuple[float, dict[str, int]]]:
        """Every update so far, oldest first."""
        assert self._watch is not None
        while True:
            try:
                at, _, node = self._watch.events.get_nowait()
            except queue.Empty:
                return self.updates
            self.updates.append((at, allocatable(node)))

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self.seen()


def _gap(updates: list[tuple[float, dict[str, int]]], wanted: dict[str, int]) -> float:
    """From the first update with a resource below `wanted` to the first one after it with every
    resource back (0 when allocatable never dropped)."""
    low = next((t for t, c in updates if any(c[e] < n for e, n in wanted.items())), None)
    if low is None:
        return 0.0
    back = next(t for t, c in updates if t > low and c == wanted)
    return back - low


def upgrade_gap(setup: Setup, runs: int = RUNS) -> Figure:
    """Per `helm upgrade` to a new image tag (the same image under another name), the seconds in
    which the node's allocatable of some KAE resource was below its healthy count, seen through
    a watch on the node."""
    wanted = setup.tree.counts(healthy_only=True)
    repository, _ = split_image(setup.image)
    setup.release.install(setup.values)
    wait_until("plugin pod Ready", setup.release.ready_pod, DEADLINE)
    setup.cluster.wait_resources(allocatable=wanted, timeout=DEADLINE)
    samples: list[float] = []
    tags = [f"bench-upgrade-{i}" for i in range(runs)]
    try:
        for tag in tags:
            setup.ctr.tag(setup.image, f"{repository}:{tag}")
            old = setup.release.ready_pod()
            assert old is not None
            watch = NodeWatch(setup.cluster)
            watch.start()
            try:
                setup.release.upgrade(f"image.tag={tag}")
                wait_until("new plugin pod Ready", lambda o=old: _replaced(setup, o), DEADLINE)
                ready = time.monotonic()
                wait_until(
                    "the watch sees every device allocatable again",
                    lambda w=watch, r=ready: any(t > r and c == wanted for t, c in w.seen()),
                    DEADLINE,
                )
            finally:
                watch.stop()
            samples.append(_gap(watch.updates, wanted))
    finally:
        _uninstall_and_settle(setup)
        for tag in tags:
            setup.ctr.remove(f"{repository}:{tag}")
    return Figure(
        key="helm_upgrade_allocatable_gap",
        label=f"helm upgrade (new image tag) -> node allocatable below healthy ({runs} upgrades)",
        unit="s",
        median=median(samples),
        note="DaemonSet RollingUpdate; node status reported every 1 s, so about 1 s resolution",
        samples=samples,
    )


def _replaced(setup: Setup, old: dict[str, Any]) -> bool:
    pod = setup.release.ready_pod()
    return pod is not None and pod["metadata"]["uid"] != old["metadata"]["uid"]


def figures(cluster: Cluster, runs: int = RUNS) -> list[Figure]:
    """Both figures, against the cluster given."""
    with prepared(cluster) as setup:
        return [install_to_capacity(setup, runs), upgrade_gap(setup, runs)]


if __name__ == "__main__":
    try:
        named = Cluster.from_env(dict(os.environ))
    except KeyError as missing:
        raise SystemExit(
            f'bench_helm: {missing} is not set: eval "$(scripts/cluster/up)"'
        ) from None
    info = machine()
    measured = figures(named)
    print(render(measured, info))
    for figure in measured:
        print(f"{figure.key}: samples {', '.join(f'{s:.2f}' for s in figure.samples)} s")
