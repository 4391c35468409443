"""The one start-up line per engine: what discovery found, and why any device is Unhealthy."""

from __future__ import annotations

import logging
from collections import Counter

from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.model import Function, Inventory, UacceDevice

log = logging.getLogger("kae_deviceplugin.devices")


def _numa(device: UacceDevice) -> str:
    return "unknown" if device.numa_node is None else str(device.numa_node)


def summary_lines(inventory: Inventory) -> list[str]:
    """Per engine: PFs, VFs, healthy, and each Unhealthy device with its reasons."""
    lines = []
    for engine in ENGINES:
        devices = [d for d in inventory if d.engine == engine.name]
        pfs = sum(d.function is Function.PF for d in devices)
        healthy = sum(d.healthy for d in devices)
        numa = Counter(_numa(d) for d in devices)
        nodes = ", ".join(f"{node}: {count}" for node, count in sorted(numa.items()))
        line = (
            f"{engine.name}: {len(devices)} devices ({pfs} PFs, {len(devices) - pfs} VFs), "
            f"{healthy} healthy, {len(devices) - healthy} unhealthy"
        )
        lines.append(line + (f"; NUMA {nodes}" if devices else ""))
        lines += [
            f"{engine.name}: {d.name} at {d.pci_address} is Unhealthy: {', '.join(d.reasons)}"
            for d in devices
            if not d.healthy
        ]
    return lines


def log_summary(inventory: Inventory) -> None:
    """Log what the first scan found: one line per engine, one per Unhealthy device."""
    for line in summary_lines(inventory):
        (log.warning if "Unhealthy" in line else log.info)("found %s", line)
