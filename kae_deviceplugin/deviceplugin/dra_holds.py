"""Devices that DRA claims hold, for the device plugin on a node that moved back from DRA mode.

The kubelet's device manager does not know what its DRA manager gave away. So when a node
leaves DRA mode with claim pods running, the device plugin asks the kubelet's pod-resources API
(``dynamic_resources`` of each running container: driver, pool, device) and advertises every
device of our driver found there as Unhealthy (reason ``held-by-dra-claim``) until its pod ends:
allocatable counts Healthy devices only, so no device-plugin pod gets it meanwhile.

Why pod-resources and not the DRA driver's checkpoint: once the node has left DRA mode no
driver is left to unprepare, so a checkpoint entry would stay, and keep its device out, for
ever; the kubelet stops listing a pod once its containers have stopped, which is when the device
is free again.

When it asks: an idle device-plugin daemon asks the kubelet nothing (a List every few seconds
was once most of what it did). In device-plugin mode no claim of ours can be prepared any more
(the driver is gone), so what DRA holds can only shrink, and only where DRA ran. So it asks
only if the driver's directory under the kubelet's exists (DRA ran on this node at some
time), every few seconds while a claim holds a device and during a first ``window`` (the
outgoing driver may still prepare a claim while it stops), and then no more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from kae_deviceplugin.core.engines import DRA_DRIVER, dra_plugin_dir
from kae_deviceplugin.core.health import HELD_BY_DRA_CLAIM
from kae_deviceplugin.errors import clipped
from kae_deviceplugin.kubelet.podresources import ListResponse, claim_devices_from
from kae_deviceplugin.kubelet.podresources_poll import (
    KUBELET_SETTLE,
    POLL_INTERVAL,
    Holders,
    HoldersPoll,
    changes,
)

log = logging.getLogger(__name__)

# How long after start it asks though nothing is held: a mode change's two daemons overlap for
# the outgoing pod's termination grace (30 s by default).
OVERLAP_WINDOW = 60.0


def dra_claim_holders(response: ListResponse) -> Holders:
    """Pool device name -> the claim (and its pod) holding it; the first in order if several
    (a shared device can serve several claims)."""
    held: dict[str, str] = {}
    for row in claim_devices_from(response, DRA_DRIVER):
        held.setdefault(
            row.device,
            f"claim {row.claim_namespace}/{row.claim_name} of pod {row.namespace}/{row.pod}",
        )
    return held


class DraClaimHolds:
    """Keeps ``held`` (pool device name -> DRA claim) and awaits ``on_change`` with it."""

    def __init__(
        self,
        socket: Path,
        kubelet_root: Path,
        on_change: Callable[[Holders], Awaitable[None]],
        *,
        interval: float = POLL_INTERVAL,
        settle: float = KUBELET_SETTLE,
        window: float = OVERLAP_WINDOW,
    ) -> None:
        self.dra_dir = dra_plugin_dir(kubelet_root)
        self.on_change = on_change
        self.window = window
        self.poll = HoldersPoll(
            socket,
            dra_claim_holders,
            self._changed,
            what="devices held by DRA claims",
            interval=interval,
            settle=settle,
        )

    @property
    def held(self) -> Holders:
        return self.poll.holders

    async def run(self) -> None:
        """The root task: ask while something may be held (see the module), then return."""
        if not self.dra_dir.is_dir():
            log.debug("%s absent: DRA never ran here, no claim can hold a device", self.dra_dir)
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + self.window
        # Done only on an answer: a kubelet that never answered has said nothing is held.
        await self.poll.run(lambda: self.poll.answered and not self.held and loop.time() >= until)
        log.info("no device is held by a DRA claim: the pod-resources API is not asked again")

    async def _changed(self, before: Holders, held: Holders) -> None:
        taken, freed = changes(before, held)
        for name, claim in taken.items():
            log.warning(
                "device %s is held by DRA %s: reported Unhealthy (%s) until that pod ends",
                name,
                clipped(claim),  # names as the kubelet reports them
                HELD_BY_DRA_CLAIM,
            )
        for name in freed:
            log.info("device %s is no longer held by a DRA claim: Healthy again if sound", name)
        await self.on_change(held)


__all__ = ["DraClaimHolds", "dra_claim_holders"]
