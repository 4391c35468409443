"""Who holds which device, asked fresh when a VF profile is about to change a PF's VFs.

Both modes ask the kubelet's pod-resources List, which reports both APIs' holders (the device
plugin's allocations and the DRA claims' devices of running pods: a node that changed modes
with pods running still counts both). DRA mode adds the claims in its checkpoint, which hold a
device from NodePrepareResources on, before any container of the pod runs.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from kae_deviceplugin.core.engines import DRA_DRIVER
from kae_deviceplugin.core.ids import pci_address_of, pool_device_name
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.core.vf_plan import Holders
from kae_deviceplugin.errors import KaeDevicePluginError
from kae_deviceplugin.kubelet.podresources import (
    PodResourcesUnavailable,
    allocations_from,
    claim_devices_from,
    list_pod_resources,
)

# Inventory -> who holds each device by PCI address, or None when that cannot be known now.
HoldersSource = Callable[[Inventory], Coroutine[Any, Any, Holders | None]]
# DRA: pool device name -> the prepared claims that hold it.
ClaimHolders = Callable[[], Mapping[str, tuple[str, ...]]]


def pod_resources_holders(socket: Path, claims: ClaimHolders | None = None) -> HoldersSource:
    """Holders from one fresh pod-resources List (and ``claims``, DRA's checkpoint)."""

    async def holders(inventory: Inventory) -> Holders | None:
        try:
            response = await list_pod_resources(socket)
        except PodResourcesUnavailable:
            return None
        by_name = {pool_device_name(d.engine, d.pci_address): d.pci_address for d in inventory}
        held: dict[str, set[str]] = {}
        for row in allocations_from(response).rows:
            held.setdefault(pci_address_of(row.device_id), set()).add(
                f"pod {row.namespace}/{row.pod}"
            )
        for claim in claim_devices_from(response, DRA_DRIVER):
            address = by_name.get(claim.device)
            if address is not None:
                held.setdefault(address, set()).add(f"pod {claim.namespace}/{claim.pod}")
        try:
            prepared = claims() if claims is not None else {}
        except (OSError, ValueError, KaeDevicePluginError):  # an unreadable checkpoint: unknown
            return None
        for name, who in prepared.items():
            address = by_name.get(name)
            if address is not None:
                held.setdefault(address, set()).update(who)
        return {address: tuple(sorted(who)) for address, who in held.items()}

    return holders
