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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_cluster import NAMESPACE, pod_manifest, running, served_plugin
from bench_core import Figure, median, p99
from dra_breakdown import KINDS, ClaimEvents, Trace, bound_at, prepares
from kube_watch import KubeApi, Watch

from tests.e2e.cluster import Cluster, FixtureTree, Plugin, make_plugin
from tests.e2e.dra import DRIVER, dra_args, request, running_dra_plugin, template

TREE = "kunpeng920-2p"
TEMPLATE = "kae-bench-hpre"
SLICES = f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3D{DRIVER}"
POD_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
TIMEOUT = 120.0
SETTLE_POD = 1.0  # seconds between the last pod's claim gone and the next pod's POST
BREAKDOWN: list[Trace] = []  # the last pod_start's pods, for cluster.py's phase table
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
def served_dra(
    cluster: Cluster, workdir: Path, tree: FixtureTree | None = None, extra: Sequence[str] = ()
) -> Iterator[tuple[Plugin, FixtureTree]]:
    """The DRA daemon on ``tree`` (else a fresh copy of the 2-socket tree), its pool published
    and the DeviceClasses applied."""
    workdir.mkdir(parents=True, exist_ok=True)
    tree = tree or FixtureTree.copy(TREE, workdir)
    args = ["--log-level", "info", *extra]
    with running_dra_plugin(cluster, tree, workdir, args) as (plugin, _cdi):
        yield plugin, tree


def _claim_pod(cluster: Cluster, name: str, claim: str | None = None) -> dict[str, Any]:
    """The pod holding a claim from TEMPLATE, or the pre-made claim ``claim``."""
    pod = pod_manifest(cluster, name, {})
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "kae"}]}
    source = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": TEMPLATE}
    pod["spec"]["resourceClaims"] = [{"name": "kae", **source}]
    return pod


def _claim(name: str) -> dict[str, Any]:
    """A ResourceClaim made before its pod, with the template's request."""
    spec = template(TEMPLATE, [request("hpre", "hpre")])["spec"]["spec"]
    metadata = {"name": name, "namespace": NAMESPACE, "labels": {"kae-bench": "pod-start"}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": metadata,
            "spec": spec}  # fmt: skip


@dataclass
class _Run:
    cluster: Cluster
    api: KubeApi
    pods: Watch
    claims: Watch
    seen: ClaimEvents = field(default_factory=ClaimEvents)


def _start(run: _Run, trace: Trace) -> None:
    """Create the pod, wait for its container to run, delete it and wait until it and its claim
    are gone; the milestones go into ``trace``. Each pod starts SETTLE_POD after the last one's
    claim is gone, so that no kind of pod shares its start with the last one's teardown."""
    api, pods = run.api, run.pods
    premade = f"{trace.pod}-claim" if trace.kind == "premade" else None
    if premade:
        api.request("POST", CLAIMS, _claim(premade))
    if trace.kind in ("claim", "premade"):
        manifest = _claim_pod(run.cluster, trace.pod, premade)
    else:
        limits = {"hpre": 1} if trace.kind == "device" else {}
        manifest = pod_manifest(run.cluster, trace.pod, limits)
    time.sleep(SETTLE_POD)
    trace.posted = time.monotonic()
    api.request("POST", POD_PATH, manifest)
    while not trace.running:
        at, _, pod = pods.next(trace.posted + TIMEOUT)
        if pod["metadata"]["name"] == trace.pod:
            bound_at(trace, at, pod)
            trace.running = at if running(pod) else 0.0
    api.request("DELETE", f"{POD_PATH}/{trace.pod}", {"gracePeriodSeconds": 0})
    while True:
        _, kind, pod = pods.next(time.monotonic() + TIMEOUT)
        if pod["metadata"]["name"] == trace.pod and kind == "DELETED":
            break
    if premade:
        api.request("DELETE", f"{CLAIMS}/{premade}")
    run.seen.take(run.claims)
    run.seen.of(trace, premade)
    if trace.claim_uid is not None:  # the template's claim goes with its pod
        run.seen.wait_gone(run.claims, trace.claim_uid, TIMEOUT)


def pod_start(cluster: Cluster, api: KubeApi, work: Path, samples: int) -> Figure:
    """Median create-to-Running with a DRA claim for one HPRE, against the same pod with a
    device-plugin HPRE and with none (and with a pre-made claim), interleaved in rotating
    order; the phases of every pod go to ``BREAKDOWN``."""
    traces: list[Trace] = []
    selector = f"{POD_PATH}?labelSelector=kae-bench%3Dpod-start"
    clock_offset = time.time() - time.monotonic()
    with (
        served_plugin(cluster, work / "dp", "plugin-watcher"),
        served_dra(cluster, work / "dra") as (plugin, _tree),
    ):
        cluster.apply(template(TEMPLATE, [request("hpre", "hpre")]))
        try:
            with Watch(api, selector) as pods, Watch(api, CLAIMS) as claims:
                run = _Run(cluster, api, pods, claims)
                order = list(KINDS)
                for i in range(samples):
                    for kind in order[i % 4 :] + order[: i % 4]:
                        trace = Trace(kind, f"bench-dra-{kind}-{i}", 0.0)
                        _start(run, trace)
                        traces.append(trace)
        finally:
            cluster.kubectl("delete", "resourceclaimtemplate", TEMPLATE, check=False)
            cluster.kubectl("delete", "resourceclaims", "-l", "kae-bench=pod-start", check=False)
        calls = prepares(plugin.log, clock_offset)
    for trace in traces:
        trace.prepare = calls.get(trace.claim_uid or "")
    BREAKDOWN[:] = traces
    return _figure(traces, samples)


def _figure(traces: list[Trace], samples: int) -> Figure:
    kinds = {k: [t.running - t.posted for t in traces if t.kind == k] for k in KINDS}
    claim, premade, device, none = (median(kinds[k]) for k in KINDS)
    return Figure(
        key="cluster_dra_pod_start",
        label=f"pod start with a DRA claim for one HPRE, real cluster ({samples} pods each)",
        unit="s",
        median=claim,
        p99=p99(kinds["claim"]),
        ratio=claim / none,
        reference=(
            f"no device {none:.3f} s; a device-plugin HPRE {device:.3f} s ({device / none:.2f}x);"
            f" a pre-made claim {premade:.3f} s ({premade / none:.2f}x)"
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
