"""Ours against the Go peers on the real single-node cluster (issue 41), beyond pod start: a
device turning unhealthy to the slice (DRA) or the node's allocatable (device plugin) saying
so, a driver restart to its pool whole again, and each driver's resident memory and idle CPU.

All four drivers serve at once (``bench_go_peers.four_drivers``), each on its own copy of the
tree, and every measurement alternates between ours and the Go peer in rotated order. Both
peers read health by polling sysfs once a second, as ours does on a tree that is not the
kernel's (no uevents describe it), so flips come at a random phase of that tick. The device
plugin's figure ends at the node's allocatable, as an operator sees it: it includes the
kubelet's node status period (1 s in this cluster), which both pay alike.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from bench_core import Figure, median, p99
from bench_floor import floor_served
from bench_go_burst import generated_tree
from bench_go_peers import GO_DRIVER, GO_PREFIX, Four, MakeTree, four_drivers
from bench_node import cpu_seconds, rss_mib
from kube_watch import KubeApi, Watch

from tests.e2e.cluster import Cluster, FixtureTree, Plugin, wait_until
from tests.e2e.dra import DRIVER

DRIVERS = {"dra-ours": DRIVER, "dra-go": GO_DRIVER}
RESOURCES = {"dp-ours": "openfuyao.com/kae.hpre", "dp-go": GO_PREFIX + "hpre"}
PEERS = {"dra": ("dra-ours", "dra-go"), "dp": ("dp-ours", "dp-go")}
QUIET = 3.0  # seconds without an event: a watch's initial list is over
TIMEOUT = 60.0


def _slices(driver: str) -> str:
    return f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3D{driver}"


def _quiet(watch: Watch) -> None:
    """Consume events until none came for QUIET seconds."""
    while True:
        try:
            watch.next(time.monotonic() + QUIET)
        except TimeoutError:
            return


def _hpre_isolate(tree: FixtureTree) -> Path:
    return tree.attr(next(n for n in tree.names() if "hpre" in n), "isolate")


def _allocatable(cluster: Cluster, resource: str) -> str | None:
    allocatable: dict[str, str] = cluster.get("node", cluster.node)["status"].get("allocatable", {})
    return allocatable.get(resource)


def _flip_to_slice(api: KubeApi, driver: str, isolate: Path, healthy: bool) -> float:
    with Watch(api, _slices(driver)) as watch:
        _quiet(watch)
        time.sleep(random.uniform(0.0, 1.0))  # a random phase of the drivers' 1 s tick
        flipped = time.monotonic()
        isolate.write_text("0\n" if healthy else "1\n")
        at, _kind, _obj = watch.next(flipped + TIMEOUT)
        return at - flipped


def _flip_to_node(
    cluster: Cluster, api: KubeApi, resource: str, isolate: Path, healthy: bool
) -> float:
    before = _allocatable(cluster, resource)
    nodes = f"/api/v1/nodes?fieldSelector=metadata.name%3D{cluster.node}"
    with Watch(api, nodes) as watch:  # never quiet: the kubelet reports status each second
        time.sleep(random.uniform(0.0, 1.0))
        flipped = time.monotonic()
        isolate.write_text("0\n" if healthy else "1\n")
        while True:
            at, _kind, node = watch.next(flipped + TIMEOUT)
            if node["status"].get("allocatable", {}).get(resource) != before:
                return at - flipped


def health(cluster: Cluster, api: KubeApi, four: Four, samples: int) -> list[Figure]:
    """``samples`` flips to unhealthy and back per driver, ours and the Go peer alternating."""
    times: dict[str, list[float]] = {kind: [] for pair in PEERS.values() for kind in pair}
    for i in range(samples * 2):
        healthy = i % 2 == 1
        for mode, pair in PEERS.items():
            for kind in pair if i % 4 < 2 else pair[::-1]:
                isolate = _hpre_isolate(four.trees[kind])
                if mode == "dra":
                    seconds = _flip_to_slice(api, DRIVERS[kind], isolate, healthy)
                else:
                    seconds = _flip_to_node(cluster, api, RESOURCES[kind], isolate, healthy)
                times[kind].append(seconds)
    return [
        _pair("health", "dra", times, "a health change to the driver's ResourceSlice written"),
        _pair("health", "dp", times, "a health change to the node's allocatable (kubelet 1 s)"),
    ]


def _restart_dra(cluster: Cluster, api: KubeApi, kind: str, driver: Plugin) -> float:
    """Stop, empty the pool, start: process start to its slices in the API again."""
    driver.stop()
    cluster.kubectl("delete", "resourceslices", f"--field-selector=spec.driver={DRIVERS[kind]}")
    with Watch(api, _slices(DRIVERS[kind])) as watch:
        _quiet(watch)
        started = time.monotonic()
        driver.start()
        at, _kind, _obj = watch.next(started + TIMEOUT)
        return at - started


def _restart_dp(cluster: Cluster, kind: str, plugin: Plugin, count: str) -> float:
    """Stop until the kubelet says none is allocatable, start: to all allocatable again."""
    resource = RESOURCES[kind]
    plugin.stop()
    wait_until(f"{resource} gone", lambda: _allocatable(cluster, resource) == "0" or None, TIMEOUT)
    started = time.monotonic()
    plugin.start()
    wait_until(
        f"{resource} back", lambda: _allocatable(cluster, resource) == count or None, TIMEOUT
    )
    return time.monotonic() - started


def restart(cluster: Cluster, api: KubeApi, four: Four, samples: int) -> list[Figure]:
    """``samples`` restarts per driver, ours and the Go peer alternating."""
    times: dict[str, list[float]] = {kind: [] for pair in PEERS.values() for kind in pair}
    for i in range(samples):
        for mode, pair in PEERS.items():
            for kind in pair if i % 2 == 0 else pair[::-1]:
                driver = four.drivers[kind]
                if mode == "dra":
                    times[kind].append(_restart_dra(cluster, api, kind, driver))
                else:
                    count = str(four.trees[kind].counts(healthy_only=True)["hpre"])
                    times[kind].append(_restart_dp(cluster, kind, driver, count))
    return [
        _pair(
            "restart", "dra", times, "process start to its ResourceSlice in the API (empty pool)"
        ),
        _pair("restart", "dp", times, "process start to every HPRE allocatable (kubelet 1 s)"),
    ]


def _pair(what: str, mode: str, times: dict[str, list[float]], note: str) -> Figure:
    ours, go = times[f"{mode}-ours"], times[f"{mode}-go"]
    peer = "the Go DRA driver" if mode == "dra" else "the Go plugin"
    return Figure(
        key=f"go_peer_{what}_{mode}",
        label=f"{what}, {'DRA' if mode == 'dra' else 'device plugin'}, ours ({len(ours)})",
        unit="s",
        median=median(ours),
        p99=p99(ours),
        ratio=median(ours) / median(go),
        reference=f"{peer} {median(go):.3f} s (p99 {p99(go):.3f})",
        target="<= 1.0x",
        met=median(ours) <= median(go),
        note=note,
        samples=ours,
    )


def at_rest(four: Four, label: str, window: float) -> list[Figure]:
    """Each driver's RSS at the end of one shared idle window, and its CPU over it, beside
    the Python floor plugin (bench_floor: a static list of as many devices, no sysfs)."""
    with floor_served(len(four.trees["dp-ours"].names())) as floor:
        pids = {kind: driver.proc.pid for kind, driver in four.drivers.items() if driver.proc}
        pids["floor"] = floor.pid
        return _idle(pids, label, window)


def _idle(pids: dict[str, int], label: str, window: float) -> list[Figure]:
    time.sleep(QUIET)  # the start's own work (first publish, registration) is not idle
    cpu = {kind: cpu_seconds(pid) for kind, pid in pids.items()}
    time.sleep(window)
    used = {kind: (cpu_seconds(pid) - cpu[kind]) / window * 100 for kind, pid in pids.items()}
    rss = {kind: rss_mib(pid) for kind, pid in pids.items()}
    rows = []
    for mode, (ours, go) in PEERS.items():
        name = "DRA driver" if mode == "dra" else "device plugin"
        rows.append(
            Figure(
                key=f"go_peer_rest_{mode}_{label}",
                label=f"{name} at rest, {label}: RSS, ours",
                unit="MiB",
                median=rss[ours],
                ratio=rss[ours] / rss[go],
                reference=(
                    f"Go {rss[go]:.1f} MiB, Python floor {rss['floor']:.1f} MiB; idle CPU ours "
                    f"{used[ours]:.2f}% of a core, Go {used[go]:.2f}%, floor {used['floor']:.2f}%"
                ),
                note=f"VmRSS after a {window:g} s idle window; CPU from schedstat over it",
            )
        )
    return rows


def figures(
    cluster: Cluster, api: KubeApi, work: Path, samples: int, window: float
) -> list[Figure]:
    """Health and restart on the 2-socket tree, then rest on it and on the 384-device tree."""
    rows: list[Figure] = []
    trees: list[tuple[str, MakeTree | None]] = [
        ("2-socket tree", None),
        ("384-device tree", generated_tree),
    ]
    for label, make_tree in trees:
        with four_drivers(cluster, work / label.split()[0], make_tree) as four:
            if make_tree is None:
                rows += health(cluster, api, four, samples)
            rows += at_rest(four, label, window)
            if make_tree is None:
                rows += restart(cluster, api, four, max(1, samples // 2))
    return rows
