"""Collects what prepared claims left behind when no unprepare came.

The kubelet unprepares a claim when its last pod ends, but a call can be lost: the driver was
down and the pod was force-deleted, a node changed modes, an instance crashed between the spec
and the checkpoint. A record the kubelet will never unprepare keeps a spec in the runtime's
directory and, for a shared device, queues counted as claimed. So every ``interval`` (and once
soon after start) each recorded claim is read from the API server: one that is gone, was
re-created under its name (another UID), or is no longer allocated cannot be in use by any pod,
and is unprepared as the kubelet would have done. A claim the API server does not answer for
is kept: only a clear answer collects. The same pass, under the checkpoint lock, removes specs
no record names and writes back missing ones (the start-up reconcile).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kae_deviceplugin.dra.checkpoint import Checkpoint
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.dra.prepare import ClaimPreparer, GetClaim
from kae_deviceplugin.errors import ApiError, clipped

log = logging.getLogger(__name__)

SWEEP_INTERVAL = 600.0  # seconds between sweeps
FIRST_SWEEP = 60.0  # after start: the kubelet's own unprepares after a restart come first


@dataclass(frozen=True, slots=True)
class Swept:
    claims: tuple[str, ...] = ()  # stale records unprepared
    specs: tuple[str, ...] = ()  # specs no record named, removed


def _gone(obj: Mapping[str, Any], uid: str) -> bool:
    metadata, status = obj.get("metadata"), obj.get("status")
    same = isinstance(metadata, Mapping) and metadata.get("uid") == uid
    allocated = isinstance(status, Mapping) and isinstance(status.get("allocation"), Mapping)
    return not (same and allocated)


async def stale_claims(state: Checkpoint, get_claim: GetClaim) -> list[ClaimRef]:
    """The recorded claims the API server says no pod can be using."""
    stale = []
    for uid, claim in sorted(state.claims.items()):
        ref = ClaimRef(claim.namespace, claim.name, uid)
        try:
            obj = await get_claim(claim.namespace, claim.name)
        except ApiError as err:
            if err.status == 404:
                stale.append(ref)
            continue  # unreachable or refused: no verdict
        if _gone(obj, uid):
            stale.append(ref)
    return stale


class StaleClaimSweeper:
    """Runs the sweep for one preparer."""

    def __init__(
        self,
        preparer: ClaimPreparer,
        get_claim: GetClaim,
        *,
        interval: float = SWEEP_INTERVAL,
        first: float = FIRST_SWEEP,
    ) -> None:
        self.preparer = preparer
        self.get_claim = get_claim
        self.interval = interval
        self.first = first

    async def sweep(self) -> Swept:
        """One pass; what it removed."""
        async with self.preparer.locked() as state:  # the records as they are now
            pass
        stale = await stale_claims(state, self.get_claim)
        errors = await self.preparer.unprepare(stale) if stale else {}
        collected = tuple(r.uid for r in stale if not errors.get(r.uid))
        for ref in stale:
            if ref.uid in collected:
                log.warning("claim %s (%s) was prepared here but is gone from the API server: "
                            "its record and CDI spec are removed",
                            ref, clipped(ref.uid))  # fmt: skip
        reconciled = await self.preparer.reconcile()
        for problem in reconciled.problems:
            log.warning("sweep of prepared claims: %s", problem)
        return Swept(collected, reconciled.removed)

    async def run(self) -> None:
        """Sweep forever; a failed pass is logged and the next one comes as planned."""
        await asyncio.sleep(self.first)
        while True:
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sweep of prepared claims failed")
            await asyncio.sleep(self.interval)
