"""What the daemon costs while nothing happens: RSS after registration, CPU over an idle window.

The daemons of all trees idle side by side in one window: idle CPU is far below a core, so they
hardly compete, and the window is paid once rather than once per tree.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack

from bench_core import Figure
from bench_node import (
    TWO_SOCKET,
    Tree,
    bare_interpreter_rss,
    cpu_seconds,
    rss_mib,
    served,
    tree_label,
)

RSS_TARGET_MIB = 45.0
CPU_TARGET_PERCENT = 0.5
SETTLE = 1.0  # s after registration: the first rescans and stream set-up are not "idle"


def resident(
    trees: Sequence[Tree], keys: Sequence[str], window: float, cpu_tree: Tree
) -> list[Figure]:
    """RSS of each tree's daemon, then % of one core over ``window`` s at default settings.

    ``keys`` name the trees in the results (stable across modes); the RSS target applies to the
    2-socket tree and the CPU target to ``cpu_tree``.
    """
    reference = bare_interpreter_rss()
    rss_rows: list[Figure] = []
    cpu_rows: list[Figure] = []
    with ExitStack() as stack:
        nodes = [stack.enter_context(served(tree)) for tree in trees]
        time.sleep(SETTLE)
        for node, tree, key in zip(nodes, trees, keys, strict=True):
            rss = rss_mib(node.pid)
            judged = tree == TWO_SOCKET
            rss_rows.append(
                Figure(
                    key=f"rss_{key}",
                    label=f"RSS, {tree_label(tree)} ({len(node.inventory)} devices)",
                    unit="MiB",
                    median=rss,
                    ratio=rss / reference,
                    reference=f"bare python {reference:.1f} MiB",
                    target=f"<= {RSS_TARGET_MIB:g} MiB" if judged else "",
                    met=rss <= RSS_TARGET_MIB if judged else None,
                )
            )
        before = [(time.monotonic(), cpu_seconds(node.pid)) for node in nodes]
        time.sleep(window)
        for node, tree, key, (t0, c0) in zip(nodes, trees, keys, before, strict=True):
            percent = 100 * (cpu_seconds(node.pid) - c0) / (time.monotonic() - t0)
            judged = tree == cpu_tree
            cpu_rows.append(
                Figure(
                    key=f"idle_cpu_{key}",
                    label=f"idle CPU {window:g} s, {tree_label(tree)}",
                    unit="% core",
                    median=percent,
                    reference=f"RSS after the window {rss_mib(node.pid):.1f} MiB",
                    target=f"<= {CPU_TARGET_PERCENT:g} %" if judged else "",
                    met=percent <= CPU_TARGET_PERCENT if judged else None,
                )
            )
    return rss_rows + cpu_rows
