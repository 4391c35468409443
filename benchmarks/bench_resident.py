"""What the daemon costs while nothing happens, in both modes, as a ratio to the floor plugin.

For each mode (bench_mode.py: uevents, every tick) and each tree the daemon and the floor
(floor_plugin.py: three grpc.aio servers, the same number of devices, a static list, no sysfs)
run side by side: CPU over one idle window that all of them share, starting 1 s after
registration, then RSS at rest, at the end of the window. Idle CPU is far below a core, so they
hardly compete, and the window is paid once rather than once per process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from bench_core import Figure
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


def _ratio(ours: float, floor: float) -> float | None:
    return ours / floor if floor > 0 else None


def idle_side_by_side(
    modes: Sequence[Mode], trees: Sequence[Tree], keys: Sequence[str], window: float
) -> list[Pair]:
    """Every (mode, tree) daemon with its floor, all idling in one window."""
    with ExitStack() as stack:
        plan = [(m, t, k) for m in modes for t, k in zip(trees, keys, strict=True)]
        nodes = [stack.enter_context(served(t, mode=m)) for m, t, _ in plan]
        floors = [
            stack.enter_context(floor_served(len(n.inventory), m))
            for (m, _, _), n in zip(plan, nodes, strict=True)
        ]
        time.sleep(SETTLE)
        pids = [p for pair in zip(nodes, floors, strict=True) for p in (pair[0].pid, pair[1].pid)]
        started = time.monotonic()
        before = [cpu_seconds(pid) for pid in pids]
        time.sleep(window)
        elapsed = time.monotonic() - started
        used = [100 * (cpu_seconds(p) - c0) / elapsed for p, c0 in zip(pids, before, strict=True)]
        resident = [rss_mib(pid) for pid in pids]  # at rest: after the idle window
    return [
        Pair(m, t, k, len(n.inventory), *used[2 * i : 2 * i + 2], *resident[2 * i : 2 * i + 2])
        for i, ((m, t, k), n) in enumerate(zip(plan, nodes, strict=True))
    ]


def resident(
    modes: Sequence[Mode], trees: Sequence[Tree], keys: Sequence[str], window: float, cpu_tree: Tree
) -> list[Figure]:
    """% of one core over ``window`` s at defaults, then RSS, of each daemon and its floor.

    ``keys`` name the trees in the results; the RSS target applies to the 2-socket tree and the
    CPU target to ``cpu_tree``, in every mode. A mode that cannot run here gives "n/a" rows.
    """
    runnable = [m for m in modes if missing(m) is None]
    pairs = idle_side_by_side(runnable, trees, keys, window)
    bare = bare_interpreter_rss()
    load = os.getloadavg()[0]
    figures: list[Figure] = []
    for mode in modes:
        why = missing(mode)
        for tree, key in zip(trees, keys, strict=True):
            if why is not None:
                figures += [
                    _not_measured(f"{kind}_{mode.key}_{key}", mode, tree, why)
                    for kind in ("rss", "idle_cpu")
                ]
                continue
            pair = next(p for p in pairs if p.mode == mode and p.key == key)
            figures += [rss_figure(pair, bare), cpu_figure(pair, window, cpu_tree, load)]
    return sorted(figures, key=lambda f: not f.key.startswith("rss"))


def _not_measured(key: str, mode: Mode, tree: Tree, why: str) -> Figure:
    what = "RSS at rest" if key.startswith("rss") else "idle CPU"
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


def modes_table(figures: Sequence[Figure]) -> str:
    """The resident figures as one Markdown table: a row per tree, both modes side by side,
    each with its ratio to the floor of the same window."""
    found = {f.key: f for f in figures if f.key.startswith(("rss_", "idle_cpu_"))}
    trees = sorted({k.rsplit("_", 1)[1] for k in found}, key=RESIDENT_ORDER.index)
    if not trees:
        return ""
    columns = [(kind, mode) for kind in ("idle_cpu", "rss") for mode in MODES]
    header = ["tree", *(f"{_KIND[kind]}, {mode.label}" for kind, mode in columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for tree in trees:
        label = ""
        cells = []
        for kind, mode in columns:
            figure = found.get(f"{kind}_{mode.key}_{tree}")
            if figure is None or figure.median is None:
                cells.append("n/a")
                continue
            label = label or figure.label.split(", ", 2)[-1]
            ratio = "" if figure.ratio is None else f" ({figure.ratio:.2f}x floor)"
            cells.append(f"{figure.median:.3g} {figure.unit}{ratio}")
        lines.append("| " + " | ".join([label or tree, *cells]) + " |")
    return "\n".join(lines)


RESIDENT_ORDER = ["2p", "mid", "large"]
_KIND = {"idle_cpu": "idle CPU", "rss": "RSS"}
