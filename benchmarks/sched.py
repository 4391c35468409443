"""What our slices cost the scheduler (issue 31): ``python benchmarks/sched.py``.

Starts a private control plane (benchmarks/sched_plane.py: etcd, kube-apiserver, kube-scheduler
and kube-controller-manager 1.37.2, no kubelet), creates N Ready nodes and times pods from create
to binding for each workload: (a) an extended resource on device-plugin nodes, (b) the same limit
served by DRA through the DeviceClass's extendedResourceName, (c) a claim for an HPRE by
algorithm, (d) an HPRE and a SEC on one NUMA node; (c) and (d) run on our slices, on a minimal
slice of the same devices and on our slices as they were before issue 31 cut them, in turn
(the order rotating over ``--rounds``), so that what the attributes cost, and what the cut
gained, are ratios of one run. See benchmarks/README.md, "Scheduling".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_core import as_json, machine, progress, render  # noqa: E402
from sched_figures import figures  # noqa: E402
from sched_objects import (  # noqa: E402
    Kube,
    Slices,
    attribute_counts,
    create_device_classes,
    create_nodes,
    full_slice,
    minimal_slice,
    prepare_namespace,
    set_device_plugin,
)
from sched_plane import Plane, control_plane, version  # noqa: E402
from sched_run import Metrics, Outcome, Workload, clean, run_workload, summary  # noqa: E402

from kae_deviceplugin.dra.slices import NodeRef  # noqa: E402

EXTENDED = "openfuyao.com/kae.zip"
DP = Workload("dp_ext", "(a) kae.zip limit, device-plugin nodes", extended=EXTENDED)
DRA_EXT = Workload("dra_ext", "(b) kae.zip limit served by DRA", extended=EXTENDED, slices="full")
BY_ALG = Workload("claim_alg", "(c) claim: an HPRE by algorithm", "by-alg", slices="full")
PAIR = Workload("claim_numa", "(d) claim: HPRE + SEC, matchAttribute numaNode", "numa-pair",
                slices="full")  # fmt: skip
BY_ALG_MIN = Workload("claim_alg_min", "(c) on the minimal slice", "by-engine", slices="minimal")
METRICS: dict[str, Metrics] = {}  # the scheduler's, while it runs
PAIR_MIN = Workload("claim_numa_min", "(d) on the minimal slice", "numa-pair", slices="minimal")
BY_ALG_BEFORE = Workload("claim_alg_before", "(c) on our slice before issue 31", "by-alg",
                         slices="before")  # fmt: skip
PAIR_BEFORE = Workload("claim_numa_before", "(d) on our slice before issue 31", "numa-pair",
                       slices="before")  # fmt: skip
BY_KIND = {"full": (BY_ALG, PAIR), "minimal": (BY_ALG_MIN, PAIR_MIN),
           "before": (BY_ALG_BEFORE, PAIR_BEFORE)}  # fmt: skip


async def run_one(kube: Kube, work: Workload, pods: int, results: list[Outcome]) -> None:
    progress(f"  {work.key}: {pods} pods ...")
    out = await run_workload(kube, work, pods, max(60.0, pods / 2), METRICS.get("scheduler"))
    cleaned = await clean(kube)
    progress(f"    {summary(out)} (cleaned in {cleaned:.1f} s)")
    results.append(out)


async def measure(args: argparse.Namespace, plane: Plane) -> dict[str, Any]:
    kube = Kube(plane.server, plane.ca, plane.token)
    METRICS["scheduler"] = Metrics(plane.scheduler_port)
    results: list[Outcome] = []
    setup: dict[str, float] = {}
    try:
        started = time.monotonic()
        await prepare_namespace(kube)
        nodes = await create_nodes(kube, args.nodes, device_plugin=True)
        setup["nodes_s"] = time.monotonic() - started
        progress(f"{len(nodes)} device-plugin nodes in {setup['nodes_s']:.1f} s")
        await asyncio.sleep(args.settle)
        await run_one(kube, DP, args.pods, results)
        await dra_phases(kube, args, nodes, results, setup)
    finally:
        await kube.close()
        await METRICS.pop("scheduler").close()
    return {"outcomes": results, "setup": setup}


async def dra_phases(
    kube: Kube, args: argparse.Namespace, nodes: list[NodeRef], results: list[Outcome],
    setup: dict[str, float],
) -> None:  # fmt: skip
    """The nodes lose the device plugin's resources and get slices; (b), then (c) and (d) on
    each kind of slice, the order rotating each round: full, minimal, before; minimal, before,
    full; ..."""
    started = time.monotonic()
    await set_device_plugin(kube, [n.name for n in nodes], on=False)
    await create_device_classes(kube)
    slices = Slices(kube, nodes)
    await slices.publish("full")
    setup["slices_s"] = time.monotonic() - started
    progress(f"slices published in {setup['slices_s']:.1f} s")
    await asyncio.sleep(args.settle)
    await run_one(kube, DRA_EXT, args.pods, results)
    share = max(1, args.pods // args.rounds)
    kinds = list(BY_KIND)
    for r in range(args.rounds):
        for kind in kinds[r % 3 :] + kinds[: r % 3]:
            if slices.kind != kind:
                begun = time.monotonic()
                await slices.publish(kind)
                progress(f"slices now {kind} ({time.monotonic() - begun:.1f} s)")
                await asyncio.sleep(args.settle)
            for work in BY_KIND[kind]:
                await run_one(kube, work, share, results)


def slice_facts() -> dict[str, Any]:
    node = NodeRef("kae-sched-0001", "00000000-0000-0000-0000-000000000000")
    full, minimal = full_slice(node, 1), minimal_slice(node, 1)
    return {
        "devices": len(full["spec"]["devices"]),
        "full_attributes": attribute_counts(full),
        "minimal_attributes": attribute_counts(minimal),
        "full_bytes": len(json.dumps(full, separators=(",", ":"))),
        "minimal_bytes": len(json.dumps(minimal, separators=(",", ":"))),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="what our slices cost the scheduler")
    parser.add_argument("--nodes", type=int, help="synthetic nodes [1000]")
    parser.add_argument("--pods", type=int, help="pods per workload [500]")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of (c) and (d) [3]")
    parser.add_argument("--smoke", action="store_true", help="20 nodes, 20 pods: runs only")
    parser.add_argument("--bin", type=Path, help="directory of the 1.37.2 binaries")
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results as JSON")
    args = parser.parse_args(argv)
    args.nodes = args.nodes or (20 if args.smoke else 1000)
    args.pods = args.pods or (20 if args.smoke else 500)
    args.settle = 1.0 if args.smoke else 3.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = machine() | {"nodes": args.nodes, "pods": args.pods, "rounds": args.rounds}
    started = time.monotonic()
    with control_plane(args.bin) as plane:
        info["kubernetes"] = version(plane.binaries)
        info["state_dir"] = str(plane.state)
        progress(f"control plane {info['kubernetes']} up in {time.monotonic() - started:.1f} s")
        run = asyncio.run(measure(args, plane))
    info["seconds"] = time.monotonic() - started
    facts = slice_facts()
    rows = figures(run["outcomes"], facts, run["setup"], args.nodes)
    print(render(rows, info, args.format))
    progress(f"done in {info['seconds']:.0f} s")
    if args.json is not None:
        document = as_json(rows, info) | {"slices": facts, "setup": run["setup"]}
        document["runs"] = [summary(o) for o in run["outcomes"]]
        args.json.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
