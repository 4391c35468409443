"""What the daemon costs while nothing happens, in both modes, as a ratio to the floor plugin.

For each mode (bench_mode.py: uevents, every tick) and each tree the daemon and the floor
(floor_plugin.py: three grpc.aio servers, the same number of devices, a static list, no sysfs)
run side by side: CPU over one idle window that all of them share, starting 1 s after
registration, then RSS at rest, at the end of the window. Idle CPU is far below a core, so they
hardly compete, and the window is paid once rather than once per process.

The DRA driver (bench_dra_node.py: ``serve --mode dra`` against the tests' HTTP API server,
registered, its slices published) idles in the same window, in each mode, on the first trees
(``dra_trees`` of them); its RSS is a ratio to the floor with as many devices, and its idle CPU
to the device plugin's on the same tree and mode.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from bench_core import Figure
from bench_dra_node import api_server, dra_served, environment_ok
from bench_floor import floor_served
from bench_mode import MODES, Mode, missing
from bench_node import (
    TWO_SOCKET,
    Tree,
    bare_interpreter_rss,
    cpu_seconds,
    rss_mib,
    served,
    tree_label,
)

RSS_TARGET_RATIO = 1.15  # of the floor's RSS, on the 2-socket tree
DRA_RSS_TARGET_RATIO = 1.25  # the DRA driver's, of the same floor
CPU_TARGET_PERCENT = 0.2  # of one core, at the CPU tree (384 devices: 2 sockets, every VF)
SETTLE = 1.0  # s after registration: the first rescans and stream set-up are not "idle"


@dataclass(frozen=True)
class Pair:
    """One daemon and its floor, measured over the same window."""

    mode: Mode
    tree: Tree
    key: str
    devices: int
    cpu: float = 0.0
    floor_cpu: float = 0.0
    rss: float = 0.0
    floor_rss: float = 0.0
    dra_cpu: float | None = None  # the DRA driver's on this tree and mode, if it ran
    dra_rss: float | None = None


def _ratio(ours: float, floor: float) -> float | None:
    return ours / floor if floor > 0 else None


def idle_side_by_side(
    modes: Sequence[Mode], trees: Sequence[Tree], keys: Sequence[str], window: float, dra: int = 0
) -> list[Pair]:
    """Every (mode, tree) daemon with its floor, and the DRA driver on the first ``dra`` trees,
    all idling in one window."""
    with ExitStack() as stack:
        plan = [(m, t, k) for m in modes for t, k in zip(trees, keys, strict=True)]
        nodes = [stack.enter_context(served(t, mode=m)) for m, t, _ in plan]
        floors = [
            stack.enter_context(floor_served(len(n.inventory), m))
            for (m, _, _), n in zip(plan, nodes, strict=True)
        ]
        api = stack.enter_context(api_server()) if dra else None
        drivers = [
            stack.enter_context(dra_served(api, t, m)) if api and t in trees[:dra] else None
            for m, t, _ in plan
        ]
        time.sleep(SETTLE)
        pids = [p for pair in zip(nodes, floors, strict=True) for p in (pair[0].pid, pair[1].pid)]
        pids += [d.pid for d in drivers if d is not None]
        started = time.monotonic()
        before = [cpu_seconds(pid) for pid in pids]
        time.sleep(window)
        elapsed = time.monotonic() - started
        used = {
            p: 100 * (cpu_seconds(p) - c0) / elapsed for p, c0 in zip(pids, before, strict=True)
        }
        resident = {pid: rss_mib(pid) for pid in pids}  # at rest: after the idle window
    return [
        Pair(
            m,
            t,
            k,
            len(n.inventory),
            used[n.pid],
            used[f.pid],
            resident[n.pid],
            resident[f.pid],
            None if d is None else used[d.pid],
            None if d is None else resident[d.pid],
        )
        for (m, t, k), n, f, d in zip(plan, nodes, floors, drivers, strict=True)
    ]


def resident(
    modes: Sequence[Mode],
    trees: Sequence[Tree],
    keys: Sequence[str],
    window: float,
    cpu_tree: Tree,
    *,
    dra: int = 2,
) -> list[Figure]:
    """% of one core over ``window`` s at defaults, then RSS, of each daemon and its floor, and
    of the DRA driver on the first ``dra`` trees.

    ``keys`` name the trees in the results; the RSS target applies to the 2-socket tree and the
    CPU target to ``cpu_tree``, in every mode. A mode that cannot run here gives "n/a" rows.
    """
    runnable = [m for m in modes if missing(m) is None]
    dra_why = environment_ok()
    pairs = idle_side_by_side(runnable, trees, keys, window, 0 if dra_why else dra)
    bare = bare_interpreter_rss()
    load = os.getloadavg()[0]
    figures: list[Figure] = []
    for mode in modes:
        why = missing(mode)
        for tree, key in zip(trees, keys, strict=True):
            with_dra = tree in trees[:dra]
            if why is not None:
                kinds = ("rss", "idle_cpu", *(("rss_dra", "idle_cpu_dra") if with_dra else ()))
                figures += [_not_measured(f"{k}_{mode.key}_{key}", mode, tree, why) for k in kinds]
                continue
            pair = next(p for p in pairs if p.mode == mode and p.key == key)
            figures += [rss_figure(pair, bare), cpu_figure(pair, window, cpu_tree, load)]
            if with_dra:
                figures += dra_figures(pair, window, cpu_tree, dra_why)
    return sorted(figures, key=lambda f: not f.key.startswith("rss"))


def _not_measured(key: str, mode: Mode, tree: Tree, why: str) -> Figure:
    what = "RSS at rest" if key.startswith("rss") else "idle CPU"
    what += ", DRA driver" if "_dra_" in key else ""
    return Figure(
        key=key, label=f"{what}, {mode.label}, {tree_label(tree)}", unit="", median=None, note=why
    )


def rss_figure(pair: Pair, bare: float) -> Figure:
    judged = pair.tree == TWO_SOCKET
    ratio = pair.rss / pair.floor_rss
    return Figure(
        key=f"rss_{pair.mode.key}_{pair.key}",
        label=f"RSS at rest, {pair.mode.label}, {tree_label(pair.tree)} ({pair.devices} devices)",
        unit="MiB",
        median=pair.rss,
        ratio=ratio,
        reference=f"floor plugin {pair.floor_rss:.1f} MiB; bare python {bare:.1f} MiB",
        target=f"<= {RSS_TARGET_RATIO:g}x" if judged else "",
        met=ratio <= RSS_TARGET_RATIO if judged else None,
    )


def cpu_figure(pair: Pair, window: float, cpu_tree: Tree, load: float) -> Figure:
    judged = pair.tree == cpu_tree
    return Figure(
        key=f"idle_cpu_{pair.mode.key}_{pair.key}",
        label=f"idle CPU {window:g} s, {pair.mode.label}, {tree_label(pair.tree)}",
        unit="% core",
        median=pair.cpu,
        ratio=_ratio(pair.cpu, pair.floor_cpu),
        reference=f"floor plugin {pair.floor_cpu:.3f} % core; load {load:.2f} at the end",
        target=f"<= {CPU_TARGET_PERCENT:g} %" if judged else "",
        met=pair.cpu <= CPU_TARGET_PERCENT if judged else None,
    )


def dra_figures(pair: Pair, window: float, cpu_tree: Tree, why: str | None) -> list[Figure]:
    """The DRA driver's RSS (to the floor of the same tree and mode) and idle CPU (to the
    device plugin's), or "n/a" rows saying why it did not run."""
    where = f"{pair.mode.label}, {tree_label(pair.tree)}"
    keys = (f"rss_dra_{pair.mode.key}_{pair.key}", f"idle_cpu_dra_{pair.mode.key}_{pair.key}")
    if pair.dra_rss is None or pair.dra_cpu is None:
        note = why or "n/a (not run)"
        return [_not_measured(k, pair.mode, pair.tree, note) for k in keys]
    ratio = pair.dra_rss / pair.floor_rss
    rss_judged = pair.tree == TWO_SOCKET
    cpu_judged = pair.tree == cpu_tree
    return [
        Figure(
            key=keys[0],
            label=f"RSS at rest, DRA driver, {where} ({pair.devices} devices)",
            unit="MiB",
            median=pair.dra_rss,
            ratio=ratio,
            reference=f"floor plugin {pair.floor_rss:.1f} MiB; device plugin {pair.rss:.1f} MiB",
            target=f"<= {DRA_RSS_TARGET_RATIO:g}x" if rss_judged else "",
            met=ratio <= DRA_RSS_TARGET_RATIO if rss_judged else None,
        ),
        Figure(
            key=keys[1],
            label=f"idle CPU {window:g} s, DRA driver, {where}",
            unit="% core",
            median=pair.dra_cpu,
            ratio=_ratio(pair.dra_cpu, pair.cpu),
            reference=f"device plugin {pair.cpu:.3f} % core (the ratio's reference)",
            target="<= device plugin" if cpu_judged else "",
            met=pair.dra_cpu <= pair.cpu if cpu_judged else None,
        ),
    ]


def modes_table(figures: Sequence[Figure]) -> str:
    """The resident figures as one Markdown table: a row per tree (and one per tree the DRA
    driver ran on), both modes side by side, each with its ratio to the floor of the same window
    (the DRA driver's idle CPU: to the device plugin's)."""
    found = {f.key: f for f in figures if f.key.startswith(("rss_", "idle_cpu_"))}
    trees = sorted({k.rsplit("_", 1)[1] for k in found}, key=RESIDENT_ORDER.index)
    if not trees:
        return ""
    columns = [(kind, mode) for kind in ("idle_cpu", "rss") for mode in MODES]
    header = ["tree", *(f"{_KIND[kind]}, {mode.label}" for kind, mode in columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for who in ("", "dra_"):
        for tree in trees:
            row = [found.get(f"{kind}_{who}{mode.key}_{tree}") for kind, mode in columns]
            if any(f is not None for f in row):
                lines.append(_table_row(row, tree, "DRA driver, " if who else ""))
    return "\n".join(lines)


def _table_row(row: Sequence[Figure | None], tree: str, who: str) -> str:
    label = ""
    cells = []
    for figure in row:
        if figure is None or figure.median is None:
            cells.append("n/a")
            continue
        label = label or figure.label.split(", ")[-1]
        of = "device plugin" if who and figure.key.startswith("idle") else "floor"
        ratio = "" if figure.ratio is None else f" ({figure.ratio:.2f}x {of})"
        cells.append(f"{figure.median:.3g} {figure.unit}{ratio}")
    return "| " + " | ".join([who + (label or tree), *cells]) + " |"


RESIDENT_ORDER = ["2p", "mid", "large"]
_KIND = {"idle_cpu": "idle CPU", "rss": "RSS"}
