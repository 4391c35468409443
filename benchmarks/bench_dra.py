"""DRA figures from the real single-node cluster (issue 20): pod start with a DRA claim, with a
device-plugin device and with neither, interleaved; daemon start to the node's ResourceSlice
published; and a health change to the slice updated, with the API writes it took.

Both daemons run as host processes at once, each on its own copy of the 2-socket tree (the
device plugin registers kae.* resources, the DRA driver publishes its pool), so the three kinds
of pod see the same node and the same noise. Times come from API watches stamped on arrival.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_cluster import pod_manifest, served_plugin, start_one
from bench_core import Figure, median, p99
from kube_watch import KubeApi, Watch

from tests.e2e.cluster import Cluster, FixtureTree, Plugin, make_plugin
from tests.e2e.dra import DRIVER, dra_args, request, running_dra_plugin, template

TREE = "kunpeng920-2p"
TEMPLATE = "kae-bench-hpre"
SLICES = f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3D{DRIVER}"
SETTLE = 3.0  # seconds after a change in which further writes of the same change are counted


def _cdi_dir(cluster: Cluster) -> Path:
    return cluster.kubelet_root.parent / "cdi"


def _dra_plugin(cluster: Cluster, workdir: Path) -> tuple[Plugin, FixtureTree]:
    workdir.mkdir(parents=True, exist_ok=True)
    tree = FixtureTree.copy(TREE, workdir)
    extra = [*dra_args(cluster, _cdi_dir(cluster)), "--log-level", "info"]
    return make_plugin(cluster, tree, workdir, "plugin-watcher", extra=extra), tree


def _delete_slices(cluster: Cluster) -> None:
    cluster.kubectl("delete", "resourceslices", f"--field-selector=spec.driver={DRIVER}")


@contextmanager
def served_dra(cluster: Cluster, workdir: Path) -> Iterator[tuple[Plugin, FixtureTree]]:
    """The DRA daemon on a fresh tree, its pool published and the DeviceClasses applied."""
    workdir.mkdir(parents=True, exist_ok=True)
    tree = FixtureTree.copy(TREE, workdir)
    with running_dra_plugin(cluster, tree, workdir, ["--log-level", "info"]) as (plugin, _cdi):
        yield plugin, tree


def _claim_pod(cluster: Cluster, name: str) -> dict[str, Any]:
    pod = pod_manifest(cluster, name, {})
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "kae"}]}
    pod["spec"]["resourceClaims"] = [{"name": "kae", "resourceClaimTemplateName": TEMPLATE}]
    return pod


def pod_start(cluster: Cluster, api: KubeApi, work: Path, samples: int) -> Figure:
    """Median create-to-Running with a DRA claim for one HPRE, against the same pod with a
    device-plugin HPRE and with none, the three interleaved in rotating order."""
    kinds: dict[str, list[float]] = {"claim": [], "device": [], "none": []}
    selector = "/api/v1/namespaces/default/pods?labelSelector=kae-bench%3Dpod-start"
    with served_plugin(cluster, work / "dp", "plugin-watcher"), served_dra(cluster, work / "dra"):
        cluster.apply(template(TEMPLATE, [request("hpre", "hpre")]))
        try:
            with Watch(api, selector) as watch:
                order = list(kinds)
                for i in range(samples):
                    for kind in order[i % 3 :] + order[: i % 3]:
                        name = f"bench-dra-{kind}-{i}"
                        pod = (
                            _claim_pod(cluster, name)
                            if kind == "claim"
                            else pod_manifest(
                                cluster, name, {"hpre": 1} if kind == "device" else {}
                            )
                        )
                        kinds[kind].append(start_one(api, watch, pod, 120.0))
        finally:
            cluster.kubectl("delete", "resourceclaimtemplate", TEMPLATE, check=False)
    claim, device, none = (median(kinds[k]) for k in ("claim", "device", "none"))
    return Figure(
        key="cluster_dra_pod_start",
        label=f"pod start with a DRA claim for one HPRE, real cluster ({samples} pods each)",
        unit="s",
        median=claim,
        p99=p99(kinds["claim"]),
        ratio=claim / none,
        reference=(
            f"no device {none:.3f} s; a device-plugin HPRE {device:.3f} s ({device / none:.2f}x)"
        ),
        target="<= 1.1x",
        met=claim / none <= 1.1,
        note="create to container running, through an API watch; claim made from a template",
        samples=kinds["claim"],
    )


def slices_published(cluster: Cluster, api: KubeApi, work: Path, samples: int) -> Figure:
    """Daemon process start to the ADDED event of its ResourceSlice, from an empty pool."""
    times: list[float] = []
    for i in range(samples):
        plugin, _tree = _dra_plugin(cluster, work / f"start-{i}")
        with Watch(api, SLICES) as watch:
            started = time.monotonic()
            plugin.start()
            try:
                while True:
                    at, kind, _obj = watch.next(started + 60.0)
                    if kind == "ADDED":
                        times.append(at - started)
                        break
            finally:
                plugin.stop()
                _delete_slices(cluster)
    return Figure(
        key="cluster_dra_slices_published",
        label=f"DRA daemon start to its ResourceSlice in the API ({samples} starts)",
        unit="s",
        median=median(times),
        p99=p99(times),
        note="process start (interpreter, scan, Node GET, create) to the watch's ADDED event",
        samples=times,
    )


def _changed(watch: Watch, since: float) -> tuple[float, int]:
    """Seconds from ``since`` to the first slice write, and the writes in the SETTLE after it."""
    at, _kind, _obj = watch.next(since + 30.0)
    writes = 1
    while True:
        try:
            watch.next(at + SETTLE)
        except TimeoutError:
            return at - since, writes
        writes += 1


def health_to_slice(cluster: Cluster, api: KubeApi, work: Path, samples: int) -> Figure:
    """isolate=1 (then 0) on one HPRE to the slice written with the change; writes per change."""
    times: list[float] = []
    writes: list[int] = []
    with served_dra(cluster, work / "health") as (_plugin, tree):
        isolate = tree.attr(next(n for n in tree.names() if "hpre" in n), "isolate")
        with Watch(api, SLICES) as watch:
            while True:  # the LISTED events of the start
                try:
                    watch.next(time.monotonic() + SETTLE)
                except TimeoutError:
                    break
            for i in range(samples * 2):
                # At a random phase of the daemon's 1 s tick: the flip would otherwise follow
                # the last write (itself on a tick) by a whole number of seconds.
                time.sleep(random.uniform(0.0, 1.0))
                flipped = time.monotonic()
                isolate.write_text("1\n" if i % 2 == 0 else "0\n")
                seconds, count = _changed(watch, flipped)
                times.append(seconds)
                writes.append(count)
    return Figure(
        key="cluster_dra_health_to_slice",
        label=f"health change to the ResourceSlice updated ({len(times)} changes)",
        unit="s",
        median=median(times),
        p99=p99(times),
        note=(
            f"API writes per change: {sorted(set(writes))} (target 1); "
            "scan interval 1 s, flips at random phase"
        ),
        samples=times,
    )
