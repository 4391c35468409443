"""How `kae-deviceplugin list` presents an inventory: a table for people, JSON for programs."""

from __future__ import annotations

import json
from collections.abc import Sequence

from kae_deviceplugin.core.model import Inventory, UacceDevice

# The JSON keys are a stable interface: add keys, never rename or remove them.
JSON_KEYS: tuple[str, ...] = (
    "name",
    "engine",
    "resource",
    "pci_address",
    "function",
    "parent_pf",
    "numa_node",
    "api",
    "flags",
    "algorithms",
    "available_instances",
    "isolate",
    "dev_state",
    "health",
    "reasons",
    "dev_node",
    "dev_node_exists",
    "driver",
    "driver_version",
    "sva",
)


def device_record(device: UacceDevice) -> dict[str, object]:
    return {
        "name": device.name,
        "engine": device.engine,
        "resource": device.resource,
        "pci_address": device.pci_address,
        "function": device.function.value,
        "parent_pf": device.parent_pf,
        "numa_node": device.numa_node,
        "api": device.api,
        "flags": device.flags,
        "algorithms": list(device.algorithms),
        "available_instances": device.available_instances,
        "isolate": device.isolate,
        "dev_state": device.dev_state,
        "health": device.health.value,
        "reasons": list(device.reasons),
        "dev_node": device.dev_node,
        "dev_node_exists": device.dev_node_exists,
        "driver": device.driver,
        "driver_version": device.driver_version,
        "sva": device.sva,
    }


def render_json(inventory: Inventory) -> str:
    return json.dumps([device_record(d) for d in inventory], indent=2)


HEADER = (
    "ENGINE",
    "NAME",
    "PCI ADDRESS",
    "FUNC",
    "PF",
    "NUMA",
    "QUEUES",
    "DRIVER",
    "HEALTH",
    "REASONS",
)


def driver_shown(device: UacceDevice) -> str:
    """``<driver> <version>`` for people: "unknown" where the module shows no version."""
    if device.driver is None:
        return "-"
    return f"{device.driver} {device.driver_version or 'unknown'}"


def table_row(device: UacceDevice) -> tuple[str, ...]:
    def shown(value: object) -> str:
        return "-" if value is None else str(value)

    return (
        device.engine,
        device.name,
        device.pci_address,
        device.function.value.upper(),
        shown(device.parent_pf),
        shown(device.numa_node),
        shown(device.available_instances),
        driver_shown(device),
        device.health.value,
        ",".join(device.reasons) or "-",
    )


NO_DEVICES = "no KAE devices found: `kae-deviceplugin doctor` says why (hardware, driver, uacce)"


def totals(inventory: Inventory) -> str:
    """The closing line: how many devices, and how many of them pods can get."""
    healthy = sum(d.healthy for d in inventory)
    count = len(inventory)
    unhealthy = count - healthy
    line = f"{count} device{'s' * (count != 1)}: {healthy} healthy, {unhealthy} unhealthy"
    return line + (" (`kae-deviceplugin doctor` gives the fixes)" if unhealthy else "")


def aligned(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows of cells as lines, each column as wide as its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return [line.rstrip() for line in lines]


def render_table(inventory: Inventory) -> str:
    if not inventory.devices:
        return NO_DEVICES
    return "\n".join([*aligned([HEADER, *map(table_row, inventory)]), totals(inventory)])
