"""What prepare refuses about a claim beyond its allocation (pure): a recorded UID under another
name, and shares that do not fit what this node publishes.

* **A UID names one claim.** The checkpoint is keyed by claim UID; a request naming a recorded
  UID with another namespace or name is not that claim (a namespace holds one object per name,
  and names never change), so it must neither rewrite nor remove the record.
* **Shares fit the device.** A result consuming ``queues`` (or carrying a share ID) takes part
  of a shared device. The scheduler checks shares against the published capacity, but the
  driver prepares whatever the claim says, so it checks again: the device must be shared here
  (its engine in ``dra.sharedEngines`` and its queue total known: ``slice_devices.share_limit``)
  and the claim's shares of it together must be within its published queues. Shares of other
  claims are not added in: a record the kubelet has not unprepared yet would refuse a claim the
  scheduler rightly placed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kae_deviceplugin.dra.checkpoint import Checkpoint, PreparedDevice
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.errors import ClaimRefused, show


def named_otherwise(state: Checkpoint, claim: ClaimRef) -> bool:
    """Whether ``claim``'s UID is recorded for another namespace or name."""
    recorded = state.claims.get(claim.uid)
    if recorded is None:
        return False
    return (recorded.namespace, recorded.name) != (claim.namespace, claim.name)


def other_name(state: Checkpoint, claim: ClaimRef) -> str:
    """The one line that says so."""
    recorded = state.claims[claim.uid]
    return (
        f"claim {claim}: its UID {claim.uid} is recorded here for claim "
        f"{recorded.namespace}/{recorded.name}, and a UID names one claim"
    )


def check_shares(
    claim: ClaimRef, results: Sequence[PreparedDevice], limits: Mapping[str, int | str]
) -> None:
    """ClaimRefused for a share on a device not shared here, or for more queues of a device
    than it publishes (this claim's shares of it together). ``limits``: by device name, the
    queues it publishes for shares, or why it is not shared."""
    taken: dict[str, int] = {}
    for result in results:
        if result.queues is None and result.share_id is None:
            continue  # the whole device
        limit = limits.get(result.device, "it publishes no queues for shares")
        if isinstance(limit, str):
            raise ClaimRefused(
                f"claim {claim}: device {result.device} is not shared ({limit}), so it "
                "takes no share"
            )
        taken[result.device] = taken.get(result.device, 0) + (result.queues or 0)
        if taken[result.device] > limit:
            raise ClaimRefused(
                f"claim {claim}: device {result.device} publishes {limit} queues, and the "
                f"claim's shares of it consume {show(taken[result.device])}"
            )
