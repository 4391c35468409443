"""The fleet benchmark's phases for one fleet size: start, rest, changes, flapping.

Each phase is bracketed by two snapshots of the publishers' counts, the CPU time of the API
server and etcd (``utime + stime`` of their processes, from ``/proc/<pid>/stat``) and of this
process, so a phase's figures are differences of two snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_core import progress
from bench_fleet import (
    TAINTS,
    CountingApi,
    Counts,
    Fleet,
    FleetNode,
    Inventories,
    clean_up,
    create_nodes,
    slices_per_node,
)

from kae_deviceplugin.apiserver.seam import NODES, ApiServer
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra.publisher import MIN_INTERVAL
from kae_deviceplugin.dra.slice_devices import DeviceOptions

COMPONENTS = ("kube-apiserver", "etcd")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
UNREACHABLE = "node.kubernetes.io/unreachable"


@dataclass(frozen=True)
class Plan:
    """How much to measure; ``SMOKE`` only proves the command runs."""

    sizes: tuple[int, ...] = (100, 1000)
    rest: float = 60.0  # seconds of the at-rest window, and of the baseline before it
    changes: int = 20  # nodes that each see a change and its reversal, per kind of change
    flap: float = 10.0  # seconds of one device flapping, without and with the rate limit
    flap_period: float = 0.1
    settle: float = 2.0  # after a phase, for the last watch events to arrive
    controller_wait: float = 150.0  # for the node controller to mark new nodes unreachable


SMOKE = Plan(sizes=(3,), rest=3.0, changes=2, flap=1.0, settle=0.5, controller_wait=0.0)


def component_pids(state_dir: Path) -> dict[str, int]:
    """The cluster's own processes, by the pid files scripts/cluster/up writes."""
    found = {}
    for name in COMPONENTS:
        try:
            pid = int((state_dir / "pids" / f"{name}.pid").read_text())
        except (OSError, ValueError):
            continue
        if Path(f"/proc/{pid}/stat").exists():
            found[name] = pid
    return found


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (every thread), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_mib(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Snapshot:
    at: float
    counts: Counts
    cpu: dict[str, float]  # component (and "client": this process) -> CPU seconds
    load: float


@dataclass
class Phase:
    """What happened between two snapshots."""

    seconds: float
    counts: Counts
    cpu: dict[str, float]
    load: float  # 1-minute load average at its end
    samples: dict[str, list[float]] = field(default_factory=dict)

    def cpu_rate(self, name: str) -> float | None:
        return self.cpu[name] / self.seconds if name in self.cpu and self.seconds else None


def snapshot(counts: Counts, pids: dict[str, int]) -> Snapshot:
    cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
    cpu["client"] = time.process_time()
    return Snapshot(time.monotonic(), dataclasses.replace(counts), cpu, os.getloadavg()[0])


def phase(before: Snapshot, after: Snapshot, **samples: list[float]) -> Phase:
    return Phase(
        seconds=after.at - before.at,
        counts=after.counts.since(before.counts),
        cpu={k: after.cpu[k] - before.cpu[k] for k in after.cpu if k in before.cpu},
        load=after.load,
        samples=dict(samples),
    )


async def until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(0.005)


async def quiet(bench: Bench, settle: float, timeout: float = 120.0) -> None:
    """Until no publisher has made a request for ``settle`` seconds: the start ends when the
    last retry of a timed-out call is done, not when the last pool is in."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = bench.counts.requests
        await asyncio.sleep(settle)
        if bench.counts.requests == seen:
            return


async def controller_done(admin: ApiServer, names: set[str], timeout: float) -> bool:
    """Whether the node controller marked every new node unreachable within ``timeout`` (it
    writes each node two or three times about 50 s after its creation; the baseline window
    must not hold those writes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = [n for n in await admin.list(NODES, {}) if n["metadata"]["name"] in names]
        keys = [{t["key"] for t in n.get("spec", {}).get("taints", [])} for n in nodes]
        if len(keys) == len(names) and all(UNREACHABLE in k for k in keys):
            return True
        await asyncio.sleep(2)
    return False


@dataclass
class Bench:
    """What every phase uses: the server, the inventories, the plan and the counters."""

    admin: ApiServer  # creates and deletes the nodes; not counted
    connect: Callable[[], ApiServer]  # a new client, one per node
    driver: str
    inv: Inventories
    plan: Plan
    pids: dict[str, int]
    counts: Counts = field(default_factory=Counts)

    def snapshot(self) -> Snapshot:
        return snapshot(self.counts, self.pids)


async def changes(bench: Bench, fleet: Fleet, sequence: Sequence[Inventory]) -> Phase:
    """Each of ``plan.changes`` nodes goes through ``sequence`` (a change, then back), one
    change at a time, interleaved across the nodes; a change waits out its node's rate limit,
    so each one is a lone change. Samples: writes per change; bytes sent and publish-to-write
    seconds per change that was written."""
    k = bench.plan.changes
    chosen = fleet.nodes[:: max(1, len(fleet.nodes) // k)][:k]
    last_write = {id(n): 0.0 for n in chosen}
    samples: dict[str, list[float]] = {"writes": [], "sent": [], "latency": []}
    before = bench.snapshot()
    for inventory in sequence:
        for node in chosen:
            await asyncio.sleep(max(0.0, last_write[id(node)] + MIN_INTERVAL - time.monotonic()))
            published = time.monotonic()
            delta = await _one_change(bench, node, inventory)
            samples["writes"].append(delta.writes)
            if delta.writes:
                samples["sent"].append(delta.sent)
                last_write[id(node)] = time.monotonic()
                samples["latency"].append(last_write[id(node)] - published)
    await asyncio.sleep(1.0)  # a write this phase caused late would still be counted
    return phase(before, bench.snapshot(), **samples)


async def _one_change(bench: Bench, node: FleetNode, inventory: Inventory) -> Counts:
    """Publish ``inventory`` to ``node`` and wait until it is written, or for 2 s (the
    publisher compares with its informer's copy, so a change it finds equal makes no request at
    all: a finding to print, not a reason to hang)."""
    publisher, counts = node.publisher, bench.counts
    assert publisher is not None
    was, writes = dataclasses.replace(counts), publisher.writes
    node.inventories.publish(inventory)
    with contextlib.suppress(TimeoutError):
        await until(lambda: publisher.writes > writes, 2.0, "")
    return counts.since(was)


async def flap(bench: Bench, node: FleetNode, limit: float) -> Phase:
    """One device of one node flips every ``flap_period`` for ``flap`` seconds (an even number
    of flips: it ends healthy), its publisher rate-limited to ``limit`` seconds (0: none)."""
    plan, inv = bench.plan, bench.inv
    assert node.publisher is not None
    node.publisher.min_interval = limit
    flips = 2 * max(1, round(plan.flap / plan.flap_period / 2))
    before = bench.snapshot()
    for flip in range(flips):
        node.inventories.publish(inv.sick if flip % 2 == 0 else inv.base)
        await asyncio.sleep(plan.flap_period)
    after = bench.snapshot()
    await asyncio.sleep(limit + plan.settle)  # the held last state is written before going on
    node.publisher.min_interval = MIN_INTERVAL
    return phase(before, after)


async def run_size(bench: Bench, n: int) -> dict[str, Any]:
    """Every phase for a fleet of ``n`` nodes; the nodes and slices are deleted at the end."""
    inv = bench.inv
    await clean_up(bench.admin, bench.driver)
    progress(f"  {n} nodes: creating them ...")
    refs = await create_nodes(bench.admin, n)
    fleet = Fleet(
        [FleetNode(r, LatestValue(inv.base), TAINTS, inv.queues, bench.driver) for r in refs]
    )
    result: dict[str, Any] = {"nodes": n}
    try:
        if bench.plan.controller_wait:
            progress("  waiting for the node controller to mark them unreachable ...")
            names = {r.name for r in refs}
            wait = bench.plan.controller_wait
            result["controller_settled"] = await controller_done(bench.admin, names, wait)
        result.update(await _start_and_rest(bench, fleet))
        progress("  changes: health flips with and without taints, hotplug ...")
        result["flip_taint"] = await changes(bench, fleet, [inv.sick, inv.base])
        for node in fleet.nodes:  # all healthy: the slices do not change, nothing is written
            node.options = DeviceOptions()
        result["flip_removal"] = await changes(bench, fleet, [inv.sick, inv.base])
        result["hotplug"] = await changes(bench, fleet, [inv.plugged, inv.base])
        progress("  one device flapping, without and with the rate limit ...")
        result["flap_free"] = await flap(bench, fleet.nodes[0], 0.0)
        result["flap_limited"] = await flap(bench, fleet.nodes[0], MIN_INTERVAL)
    finally:
        await fleet.stop()
        result["deleted_nodes"] = await clean_up(bench.admin, bench.driver)
    return result


async def _start_and_rest(bench: Bench, fleet: Fleet) -> dict[str, Any]:
    n, plan, pids = len(fleet.nodes), bench.plan, bench.pids
    progress(f"  baseline: {plan.rest:.0f} s with the nodes and no publisher ...")
    before = bench.snapshot()
    await asyncio.sleep(plan.rest)
    baseline = phase(before, bench.snapshot())
    server_rss = {name: rss_mib(pid) for name, pid in pids.items()}
    progress("  start: every publisher at once ...")
    before = bench.snapshot()
    for node in fleet.nodes:
        node.start(CountingApi(bench.connect(), bench.counts))
    await until(
        lambda: fleet.published() and bench.counts.watches >= n,
        60 + n * 0.5,
        "every pool published",
    )
    published = time.monotonic() - before.at
    await quiet(bench, plan.settle)
    start = phase(before, bench.snapshot())
    client_rss = rss_mib()
    server_growth = {name: rss_mib(pid) - server_rss[name] for name, pid in pids.items()}
    slices = await slices_per_node(bench.admin, bench.driver, [x.ref for x in fleet.nodes])
    progress(f"  at rest: {plan.rest:.0f} s ...")
    before = bench.snapshot()
    await asyncio.sleep(plan.rest)
    rest = phase(before, bench.snapshot())
    return {
        "baseline": baseline,
        "start": start,
        "published_s": published,
        "client_rss_mib": client_rss,
        "server_rss_growth_mib": server_growth,
        "slices_per_node": slices,
        "rest": rest,
    }
