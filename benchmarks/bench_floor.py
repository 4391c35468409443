"""The floor plugin (floor_plugin.py) as a process of its own, registered with its own emulator."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench_mode import TICKS, Mode
from bench_node import DEADLINE, plugin_dir, registered_since, scratch, stop
from floor_plugin import RESOURCES as FLOOR_RESOURCES

from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator

FLOOR_PLUGIN = Path(__file__).with_name("floor_plugin.py")


@dataclass
class FloorNode:
    """The floor plugin (floor_plugin.py) serving ``devices`` static IDs to its own emulator."""

    devices: int
    kubelet: KubeletEmulator
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid


@contextmanager
def floor_served(devices: int, mode: Mode = TICKS) -> Iterator[FloorNode]:
    """Start the floor plugin (as ``mode`` runs a process) beside a kubelet emulator; stop both
    on exit."""
    with scratch("kf", memory=False) as work:
        kubelet = KubeletEmulator(plugin_dir(work), dial_timeout=5.0)
        kubelet.start()
        started = time.monotonic()
        command, env = mode.command(
            [sys.executable, str(FLOOR_PLUGIN), "--plugin-dir", str(plugin_dir(work))], None
        )
        process = subprocess.Popen([*command, "--devices", str(devices)], env=env)
        try:
            if (
                not kubelet.wait_for(
                    lambda k: (
                        process.poll() is not None or registered_since(k, FLOOR_RESOURCES, started)
                    ),
                    DEADLINE,
                )
                or process.poll() is not None
            ):
                raise RuntimeError(f"the floor plugin did not register ({process.poll()})")
            yield FloorNode(devices, kubelet, process)
        finally:
            stop(process)
            kubelet.stop()
