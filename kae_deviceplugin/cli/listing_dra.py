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

__all__ = [
    "CheckpointError",
    "Holder",
    "claim_holders",
    "missing_state",
    "render_json",
    "render_table",
]
ROOT_HINT = "the kubelet's --root-dir (k0s: /var/lib/k0s/kubelet)"


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


def missing_state(kubelet_root: Path) -> str | None:
    """Why there is no driver state to read under ``kubelet_root`` (one line), or None.

    A kubelet root that is not a directory is a bad option (it starts with the flag's name); a
    root without the driver's directory means the driver never ran with this root. Either would
    otherwise list every device as free, which is what a mistyped root must not look like.
    """
    if not kubelet_root.is_dir():
        why = "does not exist" if not kubelet_root.exists() else "is not a directory"
        flag = "--kubelet-root (KAE_DP_KUBELET_ROOT)"
        return f"{flag} {kubelet_root} {why}; it must name {ROOT_HINT}"
    directory = plugin_dir(kubelet_root)
    if not directory.is_dir():
        return (
            f"no DRA driver state in {directory}: the driver has not run on this node with "
            f"--kubelet-root {kubelet_root}; check that it is {ROOT_HINT}"
        )
    return None


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


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def claims_summary(inventory: Inventory, holders: Holders) -> str:
    """The claims line: devices held and by how many claims, counting only devices this node
    shows (a claim on a vanished device has a line of its own), and those shared by several,
    so that one device held by two claims reads as the shared device it is."""
    here = [holders[name] for d in inventory if (name := device_name(d)) in holders]
    if not here:
        return "no device held by a claim"
    claims = {h.uid for found in here for h in found}
    shared = sum(len({h.uid for h in found}) > 1 for found in here)
    line = f"{_count(len(here), 'device')} held, by {_count(len(claims), 'claim')}"
    if shared:
        line += f" ({_count(shared, 'device')} shared by several claims)"
    return line


def render_table(inventory: Inventory, holders: Holders) -> str:
    """list's table with the DRA device and claim columns, the totals and a claims line."""
    summary = claims_summary(inventory, holders)
    if not inventory.devices:
        return "\n".join([NO_DEVICES, *_missing(inventory, holders)])
    rows: list[tuple[str, ...]] = [(*HEADER, "DRA DEVICE", "CLAIM")]
    for device in inventory:
        name = device_name(device)
        shown = ", ".join(map(str, holders.get(name, ()))) or "-"
        rows.append((*table_row(device), name, shown))
    lines = [*aligned(rows), totals(inventory), summary, *_missing(inventory, holders)]
    return "\n".join(lines)
