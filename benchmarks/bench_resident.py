"""What the daemon costs while nothing happens, as a ratio to the floor plugin in the same run.

For each tree the daemon and the floor (floor_plugin.py: three grpc.aio servers, the same number
of devices, a static list, no sysfs) run side by side: CPU over one idle window that all of them
share, starting 1 s after registration, then RSS at rest, at the end of the window. Idle CPU is
far below a core, so they hardly compete, and the window is paid once rather than once per process.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack

from bench_core import Figure
from bench_floor import floor_served
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
CPU_TARGET_PERCENT = 0.2  # of one core, with 400 devices
SETTLE = 1.0  # s after registration: the first rescans and stream set-up are not "idle"


def _ratio(ours: float, floor: float) -> float | None:
    return ours / floor if floor > 0 else None


def resident(
    trees: Sequence[Tree], keys: Sequence[str], window: float, cpu_tree: Tree
) -> list[Figure]:
    """% of one core over ``window`` s at defaults, then RSS, of each tree's daemon and its floor.

    ``keys`` name the trees in the results (stable across modes); the RSS target applies to the
    2-socket tree and the CPU target to ``cpu_tree``.
    """
    bare = bare_interpreter_rss()
    rss_rows: list[Figure] = []
    cpu_rows: list[Figure] = []
    with ExitStack() as stack:
        nodes = [stack.enter_context(served(tree)) for tree in trees]
        floors = [stack.enter_context(floor_served(len(node.inventory))) for node in nodes]
        time.sleep(SETTLE)
        pids = [p for pair in zip(nodes, floors, strict=True) for p in (pair[0].pid, pair[1].pid)]
        started = time.monotonic()
        before = [cpu_seconds(pid) for pid in pids]
        time.sleep(window)
        elapsed = time.monotonic() - started
        used = [100 * (cpu_seconds(p) - c0) / elapsed for p, c0 in zip(pids, before, strict=True)]
        resident = [rss_mib(pid) for pid in pids]  # at rest: after the idle window
    for index, (node, tree, key) in enumerate(zip(nodes, trees, keys, strict=True)):
        rss, floor_rss = resident[2 * index], resident[2 * index + 1]
        ours, floor_cpu = used[2 * index], used[2 * index + 1]
        rss_rows.append(rss_figure(key, tree, len(node.inventory), rss, floor=floor_rss, bare=bare))
        judged = tree == cpu_tree
        cpu_rows.append(
            Figure(
                key=f"idle_cpu_{key}",
                label=f"idle CPU {window:g} s, {tree_label(tree)}",
                unit="% core",
                median=ours,
                ratio=_ratio(ours, floor_cpu),
                reference=f"floor plugin {floor_cpu:.3f} % core",
                target=f"<= {CPU_TARGET_PERCENT:g} %" if judged else "",
                met=ours <= CPU_TARGET_PERCENT if judged else None,
            )
        )
    return rss_rows + cpu_rows


def rss_figure(
    key: str, tree: Tree, devices: int, rss: float, *, floor: float, bare: float
) -> Figure:
    judged = tree == TWO_SOCKET
    ratio = rss / floor
    return Figure(
        key=f"rss_{key}",
        label=f"RSS at rest, {tree_label(tree)} ({devices} devices)",
        unit="MiB",
        median=rss,
        ratio=ratio,
        reference=f"floor plugin {floor:.1f} MiB; bare python {bare:.1f} MiB",
        target=f"<= {RSS_TARGET_RATIO:g}x" if judged else "",
        met=ratio <= RSS_TARGET_RATIO if judged else None,
    )
