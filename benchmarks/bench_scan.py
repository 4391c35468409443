"""Discovery cost against the number of devices, and building ListAndWatch for many shared IDs."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial

from bench_core import Figure, median, p99, slope
from bench_node import build, scratch

from kae_deviceplugin.api import list_and_watch_response
from kae_deviceplugin.core.ids import MAX_SHARES, device_ids
from kae_deviceplugin.discovery.scan import scan

SCAN_TARGET_MS = 100.0
WARMUP = 2
SHARES = 16  # 625 devices x 16 shares = 10,000 IDs
SIZE_KEYS = ("small", "mid", "large")  # result keys, the same whatever the sizes


@dataclass
class Samples:
    """Milliseconds per call: CPU time of the calling thread (user + system), and wall clock.

    The figures are CPU time: on a shared machine the wall clock also counts the time spent
    waiting for a core while others run, whereas an in-memory scan never blocks, so on a quiet
    node its wall time is its CPU time. It is also what the daemon pays per scan in idle CPU.
    """

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def take(self, call: Callable[[], object]) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        call()
        self.cpu.append((time.thread_time() - cpu) * 1000)
        self.wall.append((time.perf_counter() - wall) * 1000)


def timed(call: Callable[[], object], repeats: int) -> Samples:
    """``repeats`` timed calls after a warm-up (dentry and inode caches, first-call costs)."""
    for _ in range(WARMUP):
        call()
    samples = Samples()
    for _ in range(repeats):
        samples.take(call)
    return samples


def scan_times(sizes: Sequence[int], repeats: int) -> list[Figure]:
    """Full scans of generated trees of each size, round-robin so that every size sees the same
    noise; ratios against the smallest tree."""
    with ExitStack() as stack:
        scans: list[Callable[[], object]] = []
        for size in sizes:
            root = stack.enter_context(scratch("kaescan"))
            found = len(build(root, size))
            if found != size:
                raise RuntimeError(f"a {size}-device tree scanned as {found} devices")
            scans.append(partial(scan, root / "sys", root / "dev"))
        for _ in range(WARMUP):
            for call in scans:
                call()
        samples = [Samples() for _ in sizes]
        for _ in range(repeats):
            for call, sample in zip(scans, samples, strict=True):
                sample.take(call)
    base = median(samples[0].cpu)
    figures = [
        _scan_figure(key, sizes, size, sample, base=base, repeats=repeats)
        for key, size, sample in zip(SIZE_KEYS, sizes, samples, strict=True)
    ]
    cpus = [median(s.cpu) for s in samples]
    walls = [median(s.wall) for s in samples]
    figures.append(
        Figure(
            key="scan_growth",
            label="scan cost growth per device (CPU)",
            unit="us/device",
            median=slope(list(sizes), cpus) * 1000,
            reference=(
                "least-squares slope over the sizes above; wall clock "
                f"{slope(list(sizes), walls) * 1000:.0f} us/device"
            ),
        )
    )
    return figures


def _scan_figure(
    key: str, sizes: Sequence[int], size: int, sample: Samples, *, base: float, repeats: int
) -> Figure:
    mid = median(sample.cpu)
    judged = key == "large"  # the target is for 1,000 devices, the full run's largest
    reference = f"scan of {sizes[0]:,} devices; " if key != SIZE_KEYS[0] else ""
    return Figure(
        key=f"scan_{key}",
        label=f"full scan, {size:,} devices ({repeats} scans, CPU)",
        unit="ms",
        median=mid,
        p99=p99(sample.cpu),
        ratio=mid / base if key != SIZE_KEYS[0] else None,
        reference=f"{reference}wall clock {median(sample.wall):.3g} ms",
        target=f"<= {SCAN_TARGET_MS:g} ms" if judged else "",
        met=mid <= SCAN_TARGET_MS if judged else None,
        samples=sample.cpu,
    )


def share_ids(count: int) -> list[tuple[str, str, int | None]]:
    """``count`` kubelet IDs of shared devices (16 shares each), half on each NUMA node."""
    devices = -(-count // SHARES)
    ids: list[tuple[str, str, int | None]] = []
    for n in range(devices):
        address = f"{n // 256:04x}:{n % 256:02x}:00.0"
        ids += [(i, "Healthy", 2 * (n % 2)) for i in device_ids(address, SHARES)]
    return ids[:count]


def listandwatch_build(count: int, repeats: int) -> list[Figure]:
    """Building (and, for reference, serializing) one ListAndWatch message of ``count`` IDs."""
    assert SHARES <= MAX_SHARES
    ids = share_ids(count)
    build = timed(lambda: list_and_watch_response(ids), repeats)
    message = list_and_watch_response(ids)
    wire = timed(message.SerializeToString, repeats)
    size_kib = len(message.SerializeToString()) / 1024
    mid, wire_mid = median(build.cpu), median(wire.cpu)
    return [
        Figure(
            key="listandwatch_build",
            label=f"ListAndWatch build, {count:,} IDs ({repeats} builds, CPU)",
            unit="ms",
            median=mid,
            p99=p99(build.cpu),
            reference=f"{mid * 1000 / count:.2f} us per ID; wall clock {median(build.wall):.3g} ms",
            samples=build.cpu,
        ),
        Figure(
            key="listandwatch_serialize",
            label=f"ListAndWatch serialize, {count:,} IDs (CPU)",
            unit="ms",
            median=wire_mid,
            p99=p99(wire.cpu),
            ratio=wire_mid / mid,
            reference=f"the build above; message {size_kib:.0f} KiB",
            samples=wire.cpu,
        ),
    ]
