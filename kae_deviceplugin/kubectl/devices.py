"""``kubectl kae devices``: one row per published device, with its health and holders (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kae_deviceplugin.kubectl.pool import HELD_TAINT_KEY, NUMA_NODE, PCI_BUS_ID, Pool, PoolDevice


@dataclass(frozen=True)
class DeviceRow:
    """A device as ``devices`` shows it; ``as_json`` has exactly the documented keys."""

    device: PoolDevice
    claims: tuple[dict[str, Any], ...]
    queues_claimed: int | None  # None: not shared, so its queues are not split

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
            "queues": {"total": d.queues, "claimed": self.queues_claimed},
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
        rows.append(DeviceRow(device, claims, claimed))
    return rows


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
    shown_queues = "-" if queues["total"] is None else str(queues["total"])
    if queues["claimed"] is not None:
        shown_queues = f"{queues['claimed']}/{shown_queues}"
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
