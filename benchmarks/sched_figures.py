"""The scheduling benchmark's rows: per workload the rate and the create-to-binding times, the
ratios the targets are about, and the upstream scheduler_perf anchors beside them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench_core import Figure, median, p99
from sched_run import Outcome, creation_rate

# scheduler_perf thresholds for 1.37 (upstream CI; FACTS.md section 11).
ANCHORS = {
    "dp_ext": "upstream: DP-style extended resources ~180 pods/s at 5,000 nodes",
    "dra_ext": "upstream: extended resources served by DRA ~195 pods/s at 500 nodes",
    "claim_alg": "upstream: one claim per pod ~120 pods/s at 500 nodes",
    "claim_numa": "upstream: a matchAttribute constraint about halves the rate",
}
ORDER = ("dp_ext", "dra_ext", "claim_alg", "claim_alg_min", "claim_alg_before", "claim_numa",
         "claim_numa_min", "claim_numa_before")  # fmt: skip


def pooled(outcomes: Sequence[Outcome]) -> dict[str, dict[str, Any]]:
    """Per workload over its runs: pods bound / seconds spent, latencies, creation rates."""
    pools: dict[str, dict[str, Any]] = {}
    for out in outcomes:
        pool = pools.setdefault(
            out.workload.key,
            {"label": out.workload.label, "pods": 0, "bound": 0, "span": 0.0, "latencies": [],
             "creation": [], "unschedulable": 0, "checks": [], "runs": 0},
        )  # fmt: skip
        pool["pods"] += len(out.created)
        pool["bound"] += len(out.bound)
        pool["span"] += out.span
        pool["latencies"] += out.latencies
        pool["creation"].append(creation_rate(out))
        pool["unschedulable"] += sum(out.unschedulable.values())
        pool["checks"] += out.checks
        pool["runs"] += 1
        for phase, seconds in out.scheduler.items():
            pool[phase] = pool.get(phase, 0.0) + seconds
    for pool in pools.values():
        pool["rate"] = pool["bound"] / pool["span"] if pool["span"] else 0.0
    return pools


def _note(pool: dict[str, Any]) -> str:
    made = f"{min(pool['creation']):.0f}-{max(pool['creation']):.0f}"
    parts = [f"{pool['bound']}/{pool['pods']} pods bound in {pool['runs']} run(s)",
             f"created at {made} pods/s"]  # fmt: skip
    if pool["unschedulable"]:
        parts.append(f"{pool['unschedulable']} unschedulable events")
    if pool["checks"]:
        parts.append("CHECK FAILED: " + "; ".join(pool["checks"][:2]))
    return ", ".join(parts)


def _minimal_of(key: str) -> str:
    """The workload on the minimal slice that ``key`` is compared with."""
    return key.removesuffix("_before") + "_min"


def _rate_row(key: str, pools: dict[str, dict[str, Any]]) -> Figure:
    pool = pools[key]
    ratio, reference, target, met = None, ANCHORS.get(key, ""), "", None
    if key == "claim_alg" and "claim_alg_min" in pools:
        ratio = pool["rate"] / pools["claim_alg_min"]["rate"]
        reference = f"minimal slice {pools['claim_alg_min']['rate']:.1f} pods/s; {reference}"
        target, met = ">= 0.9x minimal", ratio >= 0.9
    elif key == "claim_numa" and "claim_alg" in pools:
        ratio = pool["rate"] / pools["claim_alg"]["rate"]
        reference = f"(c) {pools['claim_alg']['rate']:.1f} pods/s; {reference}"
        target, met = ">= 0.5x (c)", ratio >= 0.5
    elif key == "claim_numa_min" and "claim_alg_min" in pools:
        ratio = pool["rate"] / pools["claim_alg_min"]["rate"]
        reference = f"(c) on the minimal slice {pools['claim_alg_min']['rate']:.1f} pods/s"
    elif key.endswith("_before") and _minimal_of(key) in pools:
        # Our slice as it was before issue 31, in the same run: what the cut gained.
        now, base = pools[key.removesuffix("_before")], pools[_minimal_of(key)]
        ratio = pool["rate"] / base["rate"]
        reference = f"minimal slice {base['rate']:.1f} pods/s; our slice now {now['rate']:.1f}"
    elif key == "dra_ext" and "dp_ext" in pools:
        ratio = pool["rate"] / pools["dp_ext"]["rate"]
        reference = f"(a) {pools['dp_ext']['rate']:.1f} pods/s; {reference}"
    return Figure(f"{key}_rate", f"{pool['label']}: pods scheduled per second", "pods/s",
                  pool["rate"], ratio=ratio, reference=reference, target=target, met=met,
                  note=_note(pool))  # fmt: skip


def _latency_row(key: str, pools: dict[str, dict[str, Any]]) -> Figure:
    pool = pools[key]
    lat = pool["latencies"]
    return Figure(f"{key}_latency", f"{pool['label']}: create to binding", "s",
                  median(lat) if lat else None, p99=p99(lat) if lat else None, samples=lat,
                  note="" if lat else "no pod bound")  # fmt: skip


def _scheduler_row(key: str, pools: dict[str, dict[str, Any]]) -> Figure:
    """The scheduler's own algorithm time per pod bound (PreFilter to Score), and Filter's."""
    pool = pools[key]
    per_pod = {p: 1000 * pool.get(p, 0.0) / max(1, pool["bound"]) for p in ("algorithm", "filter")}
    ratio, reference = None, f"of which Filter {per_pod['filter']:.1f} ms"
    minimal = pools.get(_minimal_of(key))
    if minimal is not None and minimal.get("algorithm"):
        base = 1000 * minimal["algorithm"] / max(1, minimal["bound"])
        ratio = per_pod["algorithm"] / base
        reference = f"minimal slice {base:.1f} ms; {reference}"
    value = per_pod["algorithm"] if "algorithm" in pool else None
    return Figure(f"{key}_algorithm", f"{pool['label']}: scheduler's algorithm time per pod",
                  "ms", value, ratio=ratio, reference=reference,
                  note="" if value is not None else "n/a (no scheduler metrics)")  # fmt: skip


def figures(
    outcomes: Sequence[Outcome], facts: dict[str, Any], setup: dict[str, float], nodes: int
) -> list[Figure]:
    pools = pooled(outcomes)
    keys = [k for k in ORDER if k in pools]
    rows = [_rate_row(k, pools) for k in keys] + [_latency_row(k, pools) for k in keys]
    rows += [_scheduler_row(k, pools) for k in keys]
    full, minimal = facts["full_attributes"], facts["minimal_attributes"]
    rows += [
        Figure("slice_attributes", "attributes and capacities per device, our slice", "",
               median(full), p99=max(full),
               reference=f"minimal slice {median(minimal):.0f}; {facts['devices']} devices a node"),
        Figure("slice_bytes", "slice size per node, our slice (compact JSON)", "B",
               facts["full_bytes"], ratio=facts["full_bytes"] / facts["minimal_bytes"],
               reference=f"minimal slice {facts['minimal_bytes']} B"),
        Figure("setup_nodes", f"{nodes} nodes created (with status)", "s", setup.get("nodes_s")),
        Figure("setup_slices", f"{nodes} nodes: device-plugin resources off, slices created", "s",
               setup.get("slices_s")),
    ]  # fmt: skip
    return rows
