"""Latencies from an event to what the kubelet sees: health change, kubelet restart, cold start."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from bench_core import Figure, median, p99
from bench_mode import Mode
from bench_node import (
    ServedNode,
    build,
    last_registration,
    plugin_dir,
    registered_since,
    scratch,
    spawn,
    stop,
)

from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_builder import find_uacce_dir

DEFAULT_SCAN_INTERVAL = 1.0  # Settings().scan_interval; the daemon runs with its defaults
HEALTH_TARGET = 1.0
REREGISTER_TARGET = 0.2
DEADLINE = 30.0
SETTLE = 0.3  # s between a re-registration and the next kubelet restart


def write_in_place(root: Path, name: str, attribute: str, value: str) -> None:
    """Change an attribute as the kernel does: the same file, new bytes. One ``pwrite`` of a
    value as long as the old one, so no read ever sees it torn or empty."""
    fd = os.open(find_uacce_dir(root, name) / attribute, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.pwrite(fd, f"{value}\n".encode(), 0)
    finally:
        os.close(fd)


def health_change(node: ServedNode, flips: int, mode: Mode, seed: int = 8) -> Figure:
    """Write ``isolate`` 1/0 alternately; time each write to the ListAndWatch message showing it.

    Each write waits a random fraction of the scan interval first, so that writes land at every
    phase of the daemon's scan loop instead of always just after a scan. ``mode`` names the
    node's mode (bench_mode.py) in the figure.
    """
    device = next(d for d in node.inventory.devices if d.healthy)
    rng = random.Random(seed)
    latencies: list[float] = []
    for i in range(flips):
        isolate, wanted = ("1", "Unhealthy") if i % 2 == 0 else ("0", "Healthy")
        time.sleep(rng.uniform(0.0, DEFAULT_SCAN_INTERVAL))

        def shows(kubelet: KubeletEmulator, wanted: str = wanted) -> bool:
            state = kubelet.state(device.resource)
            return state is not None and any(
                d.id == device.pci_address and d.health == wanted for d in state.devices
            )

        written = time.monotonic()
        write_in_place(node.root, device.name, "isolate", isolate)
        if not node.kubelet.wait_for(shows, DEADLINE):
            raise RuntimeError(f"isolate={isolate} of {device.name} never reached the kubelet")
        state = node.kubelet.state(device.resource)
        assert state is not None and state.updated_at is not None
        latencies.append(state.updated_at - written)
    if flips % 2:  # leave the device healthy for whatever runs next on this node
        write_in_place(node.root, device.name, "isolate", "0")
    mid = median(latencies)
    return Figure(
        key=f"health_change_{mode.key}",
        label=f"health change -> ListAndWatch, {mode.label} ({flips} flips)",
        unit="s",
        median=mid,
        p99=p99(latencies),
        ratio=mid / DEFAULT_SCAN_INTERVAL,
        reference=f"scan interval {DEFAULT_SCAN_INTERVAL:g} s (default)",
        target=f"<= {HEALTH_TARGET:g} s",
        met=mid <= HEALTH_TARGET,
        samples=latencies,
    )


def kubelet_restart(node: ServedNode, restarts: int, seed: int = 8) -> Figure:
    """Restart the emulated kubelet (new kubelet.sock, every socket deleted); time from the new
    socket being there to the last resource's Register being accepted.

    Also counts the Register calls each restart drew: one per resource is the ideal, and more
    means the daemon re-registers again after its first success.
    """
    rng = random.Random(seed)
    latencies: list[float] = []
    starts: list[float] = []
    failure = ""
    for _ in range(restarts):
        try:
            node.wait_registered(since=0.0)  # streams are up before the next restart
            # A real kubelet takes seconds to come back; SETTLE lets the daemon finish reacting
            # to the last restart, and the random part hits every phase of its 50 ms watch.
            time.sleep(SETTLE + rng.uniform(0.0, 0.1))
            before = time.monotonic()
            starts.append(before)
            node.kubelet.restart()
            back = time.monotonic()  # kubelet.sock is being served again
            done = node.wait_registered(since=before)
        except RuntimeError as err:
            # A daemon that dies or never comes back is the finding: keep what was measured.
            failure = f"FAILED at restart {len(starts)} of {restarts}: {err}"
            break
        latencies.append(max(0.0, done - back))
    if not latencies:
        return Figure(
            key="kubelet_restart",
            label=f"kubelet restart -> all re-registered ({restarts} restarts)",
            unit="s",
            median=None,
            note=f"n/a: {failure}",
            target=f"<= {REREGISTER_TARGET:g} s",
            met=False,
        )
    counted = _register_calls(node, starts)
    mid = median(latencies)
    return Figure(
        key="kubelet_restart",
        label=f"kubelet restart -> all re-registered ({restarts} restarts)",
        unit="s",
        median=mid,
        p99=p99(latencies),
        note=f"{failure}; {counted}" if failure else counted,
        target=f"<= {REREGISTER_TARGET:g} s",
        met=mid <= REREGISTER_TARGET and not failure,
        samples=latencies,
    )


def _register_calls(node: ServedNode, starts: list[float]) -> str:
    """How many Register calls each restart drew (those between its start and the next's)."""
    times = [r.time for r in node.kubelet.registrations]
    bounds = [*starts[1:], float("inf")]
    calls = [sum(a <= t < b for t in times) for a, b in zip(starts, bounds, strict=True)]
    return (
        f"Register calls per restart: median {median(calls):g}, max {max(calls)} "
        f"(ideal {len(node.resources)})"
    )


def interpreter_start() -> float:
    """Wall time of ``python -c pass``: the floor under any Python program's cold start."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.monotonic() - started


def cold_start(tree: str, starts: int) -> Figure:
    """Spawn `serve` to every resource registered, against an already running kubelet."""
    latencies: list[float] = []
    references: list[float] = []
    with scratch("kaebench") as root, scratch("kb", memory=False) as work:
        inventory = build(root, tree)
        resources = sorted(inventory.resources)
        with KubeletEmulator(plugin_dir(work), dial_timeout=5.0) as kubelet:
            for i in range(starts):
                references.append(interpreter_start())
                process, started = spawn(root, work, work / f"{i}.log")
                try:
                    done = partial(registered_since, resources=resources, since=started)
                    if not kubelet.wait_for(done, DEADLINE):
                        raise RuntimeError(f"serve did not register; see {work / f'{i}.log'}")
                    latencies.append(last_registration(kubelet, resources, started) - started)
                finally:
                    stop(process)
    mid, reference = median(latencies), median(references)
    return Figure(
        key="cold_start",
        label=f"cold start -> all registered ({starts} starts)",
        unit="s",
        median=mid,
        p99=p99(latencies),
        ratio=mid / reference,
        reference=f"python -c pass {reference * 1000:.0f} ms",
        samples=latencies,
    )
