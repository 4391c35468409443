"""How cost grows with the node: the same figures for several device counts, and for shares.

For each case (10, 100, 1,000 and 4,000 devices, and 1,000 devices with 16 shares each) the
in-process figures (CPU time of this thread, medians) and the figures of a `serve` process per
mode (bench_mode.py) on the same tree, every case and mode idling side by side in one window:

* full scan: ``scan()`` of the tree; ticks of the scan loop's ``IncrementalScanner`` read as on
  sysfs (no link-count check: see the README): a quiet tick with uevents covering the links
  (the production mode), and a tick of the every-tick mode (no udev);
* ListAndWatch: building the message of every ID of the case (devices x shares), and its size;
* idle CPU (% of one core) and RSS at the end of the window, of the daemon at default settings
  (the shares through a configuration file), in each mode, each beside a floor plugin of as many
  IDs in the same mode, whose idle CPU the ratio divides by;
* Allocate p50 of one ID, against an empty RPC on the same channel, interleaved (every-tick
  daemon: the mode does not touch Allocate).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import grpc
from bench_core import Figure, median
from bench_floor import floor_served
from bench_mode import MODES, TICKS, Mode, missing
from bench_node import ServedNode, build, cpu_seconds, rss_mib, scratch, served
from bench_scan import timed

from kae_deviceplugin.api import list_and_watch_response, pb, pb_grpc
from kae_deviceplugin.core.ids import device_ids
from kae_deviceplugin.deviceplugin.servicer import socket_name
from kae_deviceplugin.discovery.incremental import IncrementalScanner
from kae_deviceplugin.discovery.scan import scan

SETTLE = 1.0


@dataclass(frozen=True)
class Case:
    key: str  # stable across modes
    devices: int
    shares: int = 1

    @property
    def label(self) -> str:
        shared = f" x {self.shares} shares" if self.shares > 1 else ""
        return f"{self.devices:,} devices{shared}"

    def config(self) -> str | None:
        if self.shares == 1:
            return None
        engines = "".join(f"  {e}:\n    shares: {self.shares}\n" for e in ("hpre", "sec", "zip"))
        return f"version: v1\nengines:\n{engines}"


def cases(sizes: Sequence[int], shared: tuple[int, int]) -> list[Case]:
    keys = ("s1", "s2", "s3", "s4")
    return [Case(k, n) for k, n in zip(keys, sizes, strict=True)] + [Case("shared", *shared)]


def in_process(case: Case, repeats: int) -> dict[str, float]:
    """Full scan, ticks in both modes, ListAndWatch build and size for ``case``'s tree (CPU ms)."""
    with scratch("kaescale") as root:
        inventory = build(root, case.devices)
        sysfs, dev = root / "sys", root / "dev"
        full = timed(lambda: scan(sysfs, dev), max(2, repeats // 4))
        ticks = {}
        for mode in MODES:
            with IncrementalScanner(sysfs, dev, verify_files=False) as scanner:
                scanner.uevents_cover_links(mode.uevents)
                ticks[f"tick_{mode.key}"] = median(timed(scanner.scan, repeats * 5).cpu)
        ids = [
            (device_id, "Healthy", d.numa_node)
            for d in inventory
            for device_id in device_ids(d.pci_address, case.shares)
        ]
        build_ms = timed(lambda: list_and_watch_response(ids), repeats)
        size = len(list_and_watch_response(ids).SerializeToString()) / 1024
    return {
        "full_scan": median(full.cpu),
        **ticks,
        "lw_build": median(build_ms.cpu),
        "lw_size": size,
    }


def allocate_p50(node: ServedNode, calls: int) -> tuple[float, float]:
    """Median Allocate of one listed ID and median empty RPC, in ms, interleaved."""
    resource = node.resources[0]
    state = node.kubelet.state(resource)
    assert state is not None and state.devices
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=[state.devices[0].id])]
    )
    socket = node.plugin_dir / socket_name(resource)
    allocs: list[float] = []
    empties: list[float] = []
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = pb_grpc.DevicePluginStub(channel)
        for i in range(calls + 20):
            for which in (0, 1) if i % 2 else (1, 0):
                started = time.perf_counter()
                if which:
                    stub.Allocate(request, timeout=10)
                else:
                    stub.GetDevicePluginOptions(pb.Empty(), timeout=10)
                if i >= 20:  # after a warm-up
                    (allocs if which else empties).append(time.perf_counter() - started)
    return median(allocs) * 1000, median(empties) * 1000


def scale(
    sizes: Sequence[int], shared: tuple[int, int], window: float, calls: int, repeats: int
) -> list[Figure]:
    """Every figure of every case; the README's growth table is ``growth_table`` of them."""
    plan = cases(sizes, shared)
    measured = {case.key: in_process(case, repeats) for case in plan}
    modes = [mode for mode in MODES if missing(mode) is None]
    runs = [(case, mode) for case in plan for mode in modes]
    with ExitStack() as stack:
        nodes = [stack.enter_context(served(c.devices, config=c.config(), mode=m)) for c, m in runs]
        # Each daemon beside a floor plugin of its size and mode, idling in the same window:
        # on a shared machine the ratio is what compares across runs.
        # (At least one ID per resource: a floor with an empty list never counts as registered.)
        floors = [
            stack.enter_context(floor_served(max(3, c.devices * c.shares), m)) for c, m in runs
        ]
        time.sleep(SETTLE)
        for (case, mode), node in zip(runs, nodes, strict=True):
            if mode == TICKS:
                alloc, empty = allocate_p50(node, calls)
                measured[case.key] |= {"allocate": alloc, "empty_rpc": empty}
        started = time.monotonic()
        pids = [(node.pid, floor.pid) for node, floor in zip(nodes, floors, strict=True)]
        before = [(cpu_seconds(ours), cpu_seconds(theirs)) for ours, theirs in pids]
        time.sleep(window)
        elapsed = time.monotonic() - started
        for (case, mode), (ours, theirs), (cpu0, floor0) in zip(runs, pids, before, strict=True):
            measured[case.key] |= {
                f"idle_cpu_{mode.key}": 100 * (cpu_seconds(ours) - cpu0) / elapsed,
                f"floor_cpu_{mode.key}": 100 * (cpu_seconds(theirs) - floor0) / elapsed,
                f"rss_{mode.key}": rss_mib(ours),
            }
    return [figure for case in plan for figure in case_figures(case, measured[case.key])]


def _units(modes: Sequence[Mode]) -> dict[str, tuple[str, str]]:
    per_mode = {
        f"{metric}_{mode.key}": (f"{name}, {mode.label}", unit)
        for metric, name, unit in (("idle_cpu", "idle CPU", "% core"), ("rss", "RSS", "MiB"))
        for mode in modes
    }
    return {
        "full_scan": ("full scan", "ms"),
        **{
            f"tick_{m.key}": (f"{'quiet ' if m.uevents else ''}tick, {m.label}", "ms")
            for m in modes
        },
        **per_mode,
        "lw_build": ("ListAndWatch build", "ms"),
        "lw_size": ("ListAndWatch size", "KiB"),
        "allocate": ("Allocate p50", "ms"),
    }


UNITS = _units(MODES)


def case_figures(case: Case, values: dict[str, float]) -> list[Figure]:
    figures = []
    for metric, (name, unit) in UNITS.items():
        ratio, reference = None, ""
        if metric not in values:  # a mode that cannot run here
            why = next((missing(m) for m in MODES if metric.endswith(m.key)), None) or "n/a"
            figures.append(
                Figure(
                    f"scale_{case.key}_{metric}",
                    f"scale, {case.label}: {name}",
                    unit,
                    None,
                    note=why,
                )
            )
            continue
        if metric == "allocate":
            ratio = values["allocate"] / values["empty_rpc"]
            reference = f"empty RPC p50 {values['empty_rpc']:.3f} ms"
        floor = values.get(metric.replace("idle_cpu_", "floor_cpu_"), 0.0)
        if metric.startswith("idle_cpu_") and floor > 0:
            ratio = values[metric] / floor
            reference = f"floor plugin {floor:.3f} % core"
        figures.append(
            Figure(
                key=f"scale_{case.key}_{metric}",
                label=f"scale, {case.label}: {name}",
                unit=unit,
                median=values[metric],
                ratio=ratio,
                reference=reference,
            )
        )
    return figures


def growth_table(figures: Sequence[Figure]) -> str:
    """The scale figures as one Markdown table: a row per case, a column per figure."""
    by_case: dict[str, dict[str, Figure]] = {}
    for figure in figures:
        if figure.key.startswith("scale_"):
            case, metric = figure.key.removeprefix("scale_").split("_", 1)
            by_case.setdefault(case, {})[metric] = figure
    if not by_case:
        return ""
    header = ["devices", *(f"{name} ({unit})" for name, unit in UNITS.values())]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in by_case.values():
        first = next(iter(row.values()))
        cells = [first.label.split(":")[0].removeprefix("scale, ")]
        for metric in UNITS:
            figure = row[metric]
            value = f"{figure.median:.3g}" if figure.median is not None else "n/a"
            if figure.ratio is not None:
                against = "floor" if metric.startswith("idle_cpu_") else "empty RPC"
                value += f" ({figure.ratio:.2f}x {against})"
            cells.append(value)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
