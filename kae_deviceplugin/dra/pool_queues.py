"""The DRA pool's queue figures: each device's queue total as the slices publish it, the share
limits prepare checks a claim against, and the claims prepared on each device (pure of the API
and the kubelet: the front end feeds it inventories and its checkpoint's state).

Two sets of totals, on purpose: the slices' are those of the last pool built (an instance
standing by during a rolling update builds none), the shares' those of every inventory, so that
prepare on either instance checks a share against the rule the slices publish
(``slice_devices.share_limit``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kae_deviceplugin.core.model import ClaimHold, Inventory, QueueBook
from kae_deviceplugin.discovery.queues import QueueTotals
from kae_deviceplugin.dra.checkpoint import Checkpoint
from kae_deviceplugin.dra.slice_devices import device_name, share_limit


class PoolQueues:
    """Queue totals by PCI address, for the slices and for the shares."""

    def __init__(self, sysfs_root: Path) -> None:
        self._slices = QueueTotals(sysfs_root)
        self._shares = QueueTotals(sysfs_root)
        self.published: Mapping[str, int] = {}  # of the last slices built
        self.for_shares: Mapping[str, int] = {}  # of the last inventory seen

    def publish(self, inventory: Inventory) -> bool:
        """The totals of the pool about to be built; whether they changed (the claims' status
        data names them)."""
        totals = self._slices.update(inventory)
        changed = totals != self.published
        self.published = totals
        return changed

    def seen(self, inventory: Inventory) -> None:
        """A new inventory: the totals shares are checked against."""
        self.for_shares = self._shares.update(inventory)

    def share_limits(self, inventory: Inventory, shared: frozenset[str]) -> dict[str, int | str]:
        """By device name: the queues each shared device publishes for shares, or why it is
        not shared (the slices' own rule, over the totals of the last inventory)."""
        totals = self.for_shares
        return {
            device_name(d): share_limit(d, totals.get(d.pci_address), shared) for d in inventory
        }

    def book(self, inventory: Inventory, state: Checkpoint, pool: str) -> QueueBook:
        """Each device's queue total and the claims prepared on it: a share's queues, or the
        whole function (None) for a device no claim shares."""
        by_name = {device_name(d): d.pci_address for d in inventory}
        claims: dict[str, list[ClaimHold]] = {}
        for claim in state.claims.values():
            for result in claim.devices:
                pci = by_name.get(result.device)
                if result.pool == pool and pci is not None:
                    hold = ClaimHold(claim.namespace, claim.name, result.queues)
                    claims.setdefault(pci, []).append(hold)
        return QueueBook(self.published, {pci: tuple(h) for pci, h in claims.items()})
