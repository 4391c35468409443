"""Devices that device-plugin pods hold, for the DRA driver on a node that moved to DRA mode.

The kubelet's DRA manager does not know what its device manager gave away: on a node that
switched from the device plugin with pods running, a claim could be allocated, and prepared, a
device such a pod holds (seen on the real cluster: two pods, one exclusive device). So the
driver asks the kubelet's pod-resources API which of our resources running pods hold (device
IDs are PCI addresses, ``<pci>::<k>`` for shares) at start and every few seconds, and

* publishes each such device with the taint ``kae.openfuyao.com/held-by-device-plugin``
  (NoSchedule; the value names the holder pod), or leaves it out of the slice where slices
  carry no taints, until the pod ends: the scheduler allocates it to no claim meanwhile;
* refuses to prepare a claim allocated such a device (:meth:`DevicePluginHolds.guard`), in case
  one was allocated before the taint went out.

Holders are keyed by the device's name in the pool, the key claims and slices use; the holder
is ``<namespace>/<pod>``, the first in order when several share the device.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from kae_deviceplugin.core.broadcast import wait_until_set
from kae_deviceplugin.core.engines import ENGINES_BY_RESOURCE
from kae_deviceplugin.core.ids import pci_address_of, pool_device_name
from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.slice_devices import HELD_TAINT_KEY
from kae_deviceplugin.errors import ClaimRefused, clipped
from kae_deviceplugin.kubelet.podresources import ListResponse, allocations_from
from kae_deviceplugin.kubelet.podresources_poll import (
    KUBELET_SETTLE,
    POLL_INTERVAL,
    Holders,
    HoldersPoll,
    changes,
)

log = logging.getLogger(__name__)

GetClaim = Callable[[str, str], Awaitable[Mapping[str, Any]]]
# How long the first slices wait for the kubelet's first answer (its List has a 2 s deadline).
SETTLE_WAIT = 5.0


def device_plugin_holders(response: ListResponse) -> Holders:
    """Pool device name -> ``<namespace>/<pod>`` of the device-plugin pod holding it."""
    held: dict[str, str] = {}
    for row in allocations_from(response).rows:  # sorted: the first holder is stable
        name = pool_device_name(
            ENGINES_BY_RESOURCE[row.resource].name, pci_address_of(row.device_id)
        )
        held.setdefault(name, f"{row.namespace}/{row.pod}")
    return held


def _field(obj: object, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def refuse_held(claim: Mapping[str, Any], pool: str, held: Holders) -> None:
    """ClaimRefused if ``claim`` was allocated a device of ``pool`` that ``held`` names."""
    results = _field(claim, "status", "allocation", "devices", "results")
    for result in results if isinstance(results, list) else []:
        if not isinstance(result, Mapping) or result.get("driver") != DRIVER:
            continue
        device = result.get("device")
        if result.get("pool") == pool and isinstance(device, str) and device in held:
            where = _field(claim, "metadata", "namespace"), _field(claim, "metadata", "name")
            raise ClaimRefused(
                f"claim {where[0]}/{where[1]}: device {device} is held by device-plugin pod "
                f"{held[device]} (the node moved to DRA mode with it running); it is published "
                f"with the taint {HELD_TAINT_KEY} until that pod ends: delete this claim's pod "
                "and let the scheduler pick another device"
            )


class DevicePluginHolds:
    """Keeps ``held`` (pool device name -> holder pod) and calls ``on_change`` when it changes."""

    def __init__(
        self,
        socket: Path,
        pool: str,
        on_change: Callable[[], None],
        *,
        interval: float = POLL_INTERVAL,
        settle: float = KUBELET_SETTLE,
    ) -> None:
        self.pool = pool
        self.on_change = on_change
        self.poll = HoldersPoll(
            socket,
            device_plugin_holders,
            self._changed,
            what="devices held by device-plugin pods",
            interval=interval,
            settle=settle,
        )

    @property
    def held(self) -> Holders:
        return self.poll.holders

    async def run(self) -> None:
        """The root task: ask the kubelet until cancelled; never raises for its failures."""
        await self.poll.run()

    async def settled(self, timeout: float = SETTLE_WAIT) -> bool:
        """Wait (at most ``timeout``) for the first answer or failure; whether it came."""
        return await wait_until_set(self.poll.settled, timeout)

    def guard(self, get_claim: GetClaim) -> GetClaim:
        """``get_claim`` that refuses a claim allocated a held device (ClaimRefused)."""

        async def guarded(namespace: str, name: str) -> Mapping[str, Any]:
            claim = await get_claim(namespace, name)
            refuse_held(claim, self.pool, self.held)
            return claim

        return guarded

    async def _changed(self, before: Holders, held: Holders) -> None:
        taken, freed = changes(before, held)
        for name, pod in taken.items():
            log.warning(
                "device %s is held by device-plugin pod %s: kept from DRA claims (taint %s, or "
                "left out of the slice) until that pod ends",
                name,
                clipped(pod),  # namespace/name as the kubelet reports it
                HELD_TAINT_KEY,
            )
        for name in freed:
            log.info("device %s is no longer held by a device-plugin pod: free for claims", name)
        self.on_change()
