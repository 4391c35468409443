"""`kae-deviceplugin list --mode dra`: each device's name in the DRA pool and the claim holding it.

The holders come from the driver's checkpoint (``<kubelet root>/plugins/kae.openfuyao.com/``),
the record of every claim it prepared on this node, read without changing anything: no API
server is asked, so `list` works where the node has no credentials. Loaded only in DRA mode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from kae_deviceplugin.cli.listing import (
    HEADER,
    NO_DEVICES,
    aligned,
    device_record,
    table_row,
    totals,
)
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra.api import plugin_dir
from kae_deviceplugin.dra.checkpoint import CheckpointFile
from kae_deviceplugin.dra.slice_devices import device_name
from kae_deviceplugin.errors import CheckpointError

__all__ = ["CheckpointError", "Holder", "claim_holders", "render_json", "render_table"]


@dataclass(frozen=True, slots=True)
class Holder:
    """A prepared claim holding a device, and the request of the claim it was allocated for."""

    namespace: str
    name: str
    uid: str
    request: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"


Holders = Mapping[str, Sequence[Holder]]  # by DRA device name


def claim_holders(kubelet_root: Path) -> dict[str, list[Holder]]:
    """Who holds which device, by DRA device name; CheckpointError for a file not to be trusted
    (an unreadable one too, naming it)."""
    file = CheckpointFile(plugin_dir(kubelet_root))
    try:
        checkpoint = file.read_only()
    except OSError as err:
        raise CheckpointError(f"{file.path}: {err.strerror or err}") from None
    holders: dict[str, list[Holder]] = {}
    for uid, claim in sorted(checkpoint.claims.items()):
        for device in claim.devices:
            holder = Holder(claim.namespace, claim.name, uid, device.request)
            holders.setdefault(device.device, []).append(holder)
    return holders


def render_json(inventory: Inventory, holders: Holders) -> str:
    """list's JSON with two keys added: ``dra_device`` and ``claims`` (empty when free)."""
    records = []
    for device in inventory:
        name = device_name(device)
        claims = [asdict(h) for h in holders.get(name, ())]
        records.append({**device_record(device), "dra_device": name, "claims": claims})
    return json.dumps(records, indent=2)


def _missing(inventory: Inventory, holders: Holders) -> list[str]:
    """A line per claimed device this node's scan does not show (gone, or driver unbound)."""
    present = {device_name(d) for d in inventory}
    return [
        f"{holder} holds {name}, which this node does not show now"
        for name, found in sorted(holders.items())
        if name not in present
        for holder in found
    ]


def render_table(inventory: Inventory, holders: Holders) -> str:
    """list's table with the DRA device and claim columns, the totals and a claims line."""
    claimed = {h.uid for found in holders.values() for h in found}
    held = sum(device_name(d) in holders for d in inventory)
    summary = f"{held} held by {len(claimed)} claim{'s' * (len(claimed) != 1)}"
    if not inventory.devices:
        return "\n".join([NO_DEVICES, *_missing(inventory, holders)])
    rows: list[tuple[str, ...]] = [(*HEADER, "DRA DEVICE", "CLAIM")]
    for device in inventory:
        name = device_name(device)
        shown = ", ".join(map(str, holders.get(name, ()))) or "-"
        rows.append((*table_row(device), name, shown))
    lines = [*aligned(rows), totals(inventory), summary, *_missing(inventory, holders)]
    return "\n".join(lines)
