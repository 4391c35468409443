"""Collects what prepared claims left behind when no unprepare came, and only what is proven
left behind.

The kubelet unprepares a claim when its last pod ends, and retries until the driver answers,
but a call can still be lost: the kubelet's own state wiped, a node changed modes, a claim's
record written by an instance that died. A record the kubelet will never unprepare keeps a spec
in the runtime's directory and, for a shared device, queues counted as claimed. So every
``interval`` (and once soon after start) each recorded claim is read from the API server, and
is unprepared as the kubelet would have done only when the answer proves no pod can still use
it, twice in a row:

* **Proven gone**: a 404 whose Status names the claim (``details.name`` is the claim's name and
  ``details.kind`` is ``resourceclaims``); or the claim's name now holds an object with another
  UID (a namespace holds one object per name, so the recorded one was deleted); or the recorded
  UID is there but deallocated with no pod in ``status.reservedFor`` (the API server keeps a
  claim allocated while any pod reserves it).
* **Never a verdict**: a bare 404 (no Status, or one naming nothing: "no such API", a proxy's
  page), any other refusal, no answer, an answer that is not the claim asked for, or the claim
  allocated or reserved. Those records are kept.
* **Twice, an interval apart**: a claim proven gone is collected at the next sweep that proves
  it gone again. A pod force-deleted from the API is still being stopped on the node for a
  while, and the kubelet unprepares its claims itself when it has; a record still there a whole
  interval later is one the kubelet will not unprepare. (NVIDIA's driver collects only claims
  whose prepare never completed; this one's records exist only for completed prepares, so the
  rule above is how it stays as careful.)

The same pass, under the checkpoint lock, removes specs no record names and writes back missing
ones (the start-up reconcile). A checkpoint that cannot be read stops the pass in one line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kae_deviceplugin.apiserver.seam import RESOURCE_CLAIMS
from kae_deviceplugin.dra.checkpoint import Checkpoint, PreparedClaim
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.dra.prepare import ClaimPreparer, GetClaim
from kae_deviceplugin.errors import ApiError, CheckpointError, clipped

log = logging.getLogger(__name__)

SWEEP_INTERVAL = 600.0  # seconds between sweeps
FIRST_SWEEP = 60.0  # after start: the kubelet's own unprepares after a restart come first


@dataclass(frozen=True, slots=True)
class Swept:
    claims: tuple[str, ...] = ()  # stale records unprepared
    specs: tuple[str, ...] = ()  # specs no record named, removed
    pending: tuple[str, ...] = ()  # proven gone once: collected if the next sweep agrees


def names_the_claim(err: ApiError, claim: PreparedClaim) -> bool:
    """Whether ``err`` is the API server saying this very claim does not exist: a 404 whose
    Status names it. A 404 naming nothing may mean the API itself is not served."""
    details = err.details
    if err.status != 404 or details is None:
        return False
    group = details.get("group", RESOURCE_CLAIMS.group)
    return (
        details.get("name") == claim.name
        and details.get("kind") == RESOURCE_CLAIMS.plural
        and group == RESOURCE_CLAIMS.group
    )


def proves_gone(obj: Mapping[str, Any], uid: str, claim: PreparedClaim) -> bool:
    """Whether the object read under the claim's name proves the recorded claim ``uid`` gone:
    another object holds the name, or the claim is deallocated with no pod reserving it.
    Anything else, or anything unexpected, is no proof."""
    metadata, status = obj.get("metadata"), obj.get("status")
    if not isinstance(metadata, Mapping) or metadata.get("name") != claim.name:
        return False  # not the object asked for: no verdict
    if metadata.get("namespace", claim.namespace) != claim.namespace:
        return False
    found = metadata.get("uid")
    if not isinstance(found, str) or not found:
        return False
    if found != uid:
        return True  # one object per name: the recorded one was deleted
    if not isinstance(status, Mapping):
        return False
    return status.get("allocation") is None and not status.get("reservedFor")


async def stale_claims(state: Checkpoint, get_claim: GetClaim) -> list[ClaimRef]:
    """The recorded claims the API server proves no pod can be using (this sweep's verdict)."""
    stale = []
    for uid, claim in sorted(state.claims.items()):
        ref = ClaimRef(claim.namespace, claim.name, uid)
        try:
            obj = await get_claim(claim.namespace, claim.name)
        except ApiError as err:
            if names_the_claim(err, claim):
                stale.append(ref)
            continue  # unreachable, refused, or a 404 naming nothing: no verdict
        if proves_gone(obj, uid, claim):
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
        self.pending: set[str] = set()  # UIDs the last sweep proved gone: at most the records

    async def sweep(self) -> Swept:
        """One pass; what it removed, and what it will remove next time if still gone."""
        async with self.preparer.locked() as state:  # the records as they are now
            pass
        proven = await stale_claims(state, self.get_claim)
        stale = [r for r in proven if r.uid in self.pending]
        self.pending = {r.uid for r in proven} - {r.uid for r in stale}
        for ref in proven:
            if ref.uid in self.pending:
                log.info("claim %s (%s) was prepared here and is gone from the API server: "
                         "collected at the next sweep if it still is", ref, ref.uid)  # fmt: skip
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
        return Swept(collected, reconciled.removed, tuple(sorted(self.pending)))

    async def run(self) -> None:
        """Sweep forever; a failed pass is logged and the next one comes as planned."""
        await asyncio.sleep(self.first)
        while True:
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except CheckpointError as err:  # said once by the preparer; readiness says it too
                log.debug("sweep of prepared claims skipped: %s", err)
            except Exception:
                log.exception("sweep of prepared claims failed")
            await asyncio.sleep(self.interval)
