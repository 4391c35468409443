"""Every figure of issue 8 in one table: ``python benchmarks/run.py [--quick] [--repeat N]``.

See benchmarks/README.md for what each row measures and how to read it. Progress goes to
stderr, the table to stdout; ``--json FILE`` also writes every figure with its raw samples.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bench_core import Figure, as_json, machine, render, section
from bench_events import cold_start, health_change, kubelet_restart
from bench_mode import MODES, TICKS, Mode, missing
from bench_node import TWO_SOCKET, ServedNode, Tree, served
from bench_resident import modes_table, resident
from bench_rpc import allocate_vs_empty
from bench_scale import growth_table, scale
from bench_scan import listandwatch_build, scan_times
from bench_udev import udev_event

SECTIONS = (
    "rpc",
    "health",
    "udev",
    "restart",
    "cold",
    "resident",
    "scan",
    "listandwatch",
    "scale",
)


@dataclass(frozen=True)
class Plan:
    """How much to measure. The defaults are the full run; ``SMOKE`` only proves it still runs."""

    calls: int = 3000
    flips: int = 10
    restarts: int = 20
    starts: int = 10
    udev_events: int = 10
    scan_repeats: int = 20
    listandwatch_repeats: int = 20
    scan_sizes: tuple[int, int, int] = (10, 100, 1000)
    # The 2-socket node as it is, with every VF enabled (6 PFs x 64), and a larger one.
    resident_trees: tuple[Tree, Tree, Tree] = (TWO_SOCKET, 384, 1000)
    cpu_tree: Tree = 384
    idle_window: float = 30.0
    listandwatch_ids: int = 10_000
    scale_sizes: tuple[int, int, int, int] = (10, 100, 1000, 4000)
    scale_shared: tuple[int, int] = (1000, 16)  # devices, shares
    scale_calls: int = 300

    def repeated(self, n: int) -> Plan:
        return dataclasses.replace(
            self,
            flips=n,
            restarts=n,
            starts=n,
            udev_events=n,
            scan_repeats=n,
            listandwatch_repeats=n,
        )


SMOKE = Plan(
    calls=20,
    flips=2,
    restarts=2,
    starts=1,
    udev_events=1,
    scan_repeats=2,
    listandwatch_repeats=2,
    scan_sizes=(2, 4, 8),
    resident_trees=(TWO_SOCKET, 8, 16),
    cpu_tree=8,
    idle_window=0.5,
    listandwatch_ids=100,
    scale_sizes=(2, 4, 8, 16),
    scale_shared=(8, 4),
    scale_calls=5,
)
RESIDENT_KEYS = ("2p", "mid", "large")


def plan_from(args: argparse.Namespace) -> Plan:
    plan = SMOKE if args.smoke else Plan()
    if args.repeat is not None:
        plan = plan.repeated(args.repeat)
    if args.quick and not args.smoke:
        plan = dataclasses.replace(plan, idle_window=5.0)
    if args.calls is not None:
        plan = dataclasses.replace(plan, calls=args.calls)
    return plan


class Runner:
    """Runs the chosen sections in table order; a failing section becomes a row, not a crash."""

    def __init__(self, plan: Plan, sections: set[str]) -> None:
        self.plan = plan
        self.sections = sections
        self.figures: list[Figure] = []
        self.failed = False
        self._stack = ExitStack()
        self._nodes: dict[Mode, ServedNode] = {}

    def node(self, mode: Mode = TICKS) -> ServedNode:
        """One daemon per mode on the 2-socket tree, shared by the RPC, health and restart
        sections."""
        if mode not in self._nodes:
            self._nodes[mode] = self._stack.enter_context(served(TWO_SOCKET, mode=mode))
        return self._nodes[mode]

    def health(self) -> list[Figure]:
        """Health change in each mode (n/a where the mode cannot run here)."""
        figures = []
        for mode in MODES:
            why = missing(mode)
            if why is None:
                figures.append(health_change(self.node(mode), self.plan.flips, mode))
            else:
                label = f"health change -> ListAndWatch, {mode.label}"
                figures.append(Figure(f"health_change_{mode.key}", label, "s", None, note=why))
        return figures

    def section(self, name: str, measure: Callable[[], list[Figure]]) -> None:
        if name in self.sections and not section(name, measure, self.figures):
            self.failed = True

    def run(self) -> list[Figure]:
        p = self.plan
        with self._stack:
            self.section("rpc", lambda: allocate_vs_empty(self.node(), p.calls))
            self.section("health", self.health)
            self.section("udev", lambda: [udev_event(p.udev_events)])
            self.section("restart", lambda: [kubelet_restart(self.node(), p.restarts)])
        self.section("cold", lambda: [cold_start(TWO_SOCKET, p.starts)])
        self.section(
            "resident",
            lambda: resident(MODES, p.resident_trees, RESIDENT_KEYS, p.idle_window, p.cpu_tree),
        )
        self.section("scan", lambda: scan_times(p.scan_sizes, p.scan_repeats))
        self.section(
            "listandwatch", lambda: listandwatch_build(p.listandwatch_ids, p.listandwatch_repeats)
        )
        self.section(
            "scale",
            lambda: scale(
                p.scale_sizes, p.scale_shared, p.idle_window, p.scale_calls, p.scan_repeats
            ),
        )
        return self.figures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="kae-deviceplugin benchmarks (issue 8)")
    parser.add_argument("--quick", action="store_true", help="idle CPU over 5 s instead of 30 s")
    parser.add_argument(
        "--repeat", type=int, metavar="N", help="samples per event figure and scan size"
    )
    parser.add_argument("--calls", type=int, metavar="N", help="Allocate/empty RPC pairs [3000]")
    parser.add_argument("--smoke", action="store_true", help="tiny trees, 1-2 samples: runs only")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results as JSON")
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    parser.add_argument(
        "--only", metavar="S,S", help=f"comma-separated sections of {', '.join(SECTIONS)}"
    )
    args = parser.parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.only:
        unknown = set(args.only.split(",")) - set(SECTIONS)
        if unknown:
            parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = plan_from(args)
    sections = set(args.only.split(",")) if args.only else set(SECTIONS)
    info = machine()
    runner = Runner(plan, sections)
    figures = runner.run()
    print(render(figures, info, args.format))
    both = modes_table(figures)
    if both:
        print("\nAt rest in both modes (ratios to the floor plugin of the same window):\n\n" + both)
    table = growth_table(figures)
    if table:
        print("\nHow cost grows (the scale rows above, one row per case):\n\n" + table)
    if args.json is not None:
        document = as_json(figures, info) | {"plan": dataclasses.asdict(plan)}
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main())
