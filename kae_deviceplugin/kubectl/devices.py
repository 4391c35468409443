"""``kubectl kae devices``: one row per published device, with its health and holders (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kae_deviceplugin.kubectl.pool import (
    HELD_TAINT_KEY,
    NUMA_NODE,
    PCI_BUS_ID,
    Hold,
    Pool,
    PoolDevice,
)


@dataclass(frozen=True)
class DeviceRow:
    """A device as ``devices`` shows it; ``as_json`` has exactly the documented keys."""

    device: PoolDevice
    claims: tuple[dict[str, Any], ...]
    queues_claimed: int | None  # None: not shared, so its queues are not split
    queues_total: int | None = None  # the slice's (shared), else the driver's claim status
    queues_granted: int | None = None  # 0 while free; None: held, not yet in the claim status

    @property
    def reasons(self) -> list[str]:
        """The unhealthy taint's reasons, then the device-plugin pod still holding it."""
        held = self.device.held_by
        return [*self.device.reasons, *([f"{HELD_TAINT_KEY}={held}"] if held else [])]

    def as_json(self) -> dict[str, Any]:
        d = self.device
        return {
            "node": d.node,
            "device": d.name,
            "engine": d.engine,
            "function": d.attribute("function"),
            "numaNode": d.attribute(NUMA_NODE),
            "pciBusID": d.attribute(PCI_BUS_ID),
            "healthy": not d.reasons,
            "reasons": self.reasons,
            "claims": [dict(c) for c in self.claims],
            "queues": {
                "total": self.queues_total,
                "claimed": self.queues_claimed,
                "granted": self.queues_granted,
            },
        }


def device_rows(pool: Pool, node: str | None = None) -> list[DeviceRow]:
    """The devices of ``node`` (every node: None), by node and name."""
    rows = []
    for device in pool.devices:
        if node is not None and device.node != node:
            continue
        claims = tuple(
            {"namespace": h.namespace, "name": h.claim, "pods": list(h.pods)}
            for h in pool.holds_of(device)
        )
        claimed = pool.queues_claimed(device) if device.shared else None
        total, granted = _queues(device, pool.holds_of(device), claimed)
        rows.append(DeviceRow(device, claims, claimed, total, granted))
    return rows


def _queues(
    device: PoolDevice, holds: tuple[Hold, ...], claimed: int | None
) -> tuple[int | None, int | None]:
    """The device's queue total and the queues granted on it: the shares' sum on a shared
    device; on another, the whole function its claim holds, as the driver wrote it in the
    claim's status (the slice of an unshared device has no queue count)."""
    total = (
        device.queues
        if device.queues is not None
        else next((h.total for h in holds if h.total is not None), None)
    )
    if claimed is not None or not holds:
        return total, claimed if claimed is not None else 0
    return total, next((h.granted for h in holds if h.granted is not None), None)


def table_row(row: DeviceRow) -> list[str]:
    """The row's cells for the table (the headers are ``TABLE_HEADERS``)."""
    data = row.as_json()
    health = "Healthy" if data["healthy"] else "Unhealthy"
    if data["reasons"]:
        health += " (" + ", ".join(data["reasons"]) + ")"
    holders = [
        f"{c['namespace']}/{c['name']}" + (f" [{','.join(c['pods'])}]" if c["pods"] else "")
        for c in data["claims"]
    ]
    queues = data["queues"]
    granted, total = queues["granted"], queues["total"]
    shown_queues = "-"  # a free unshared device: its total is in no API object
    if total is not None:
        shown_queues = f"{'?' if granted is None else granted}/{total}"
    return [
        data["node"], data["device"], data["engine"], _cell(data["function"]),
        _cell(data["numaNode"]), _cell(data["pciBusID"]), health,
        ", ".join(holders) or "-", shown_queues,
    ]  # fmt: skip


TABLE_HEADERS = [
    "NODE", "DEVICE", "ENGINE", "FUNCTION", "NUMA", "PCI", "HEALTH", "CLAIMS [PODS]", "QUEUES",
]  # fmt: skip


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)
