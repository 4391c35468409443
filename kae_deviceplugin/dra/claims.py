"""What a ResourceClaim, as the API server returns it, allocates to this driver here (pure).

The kubelet's request names a claim only by namespace, name and UID; the devices are in the
claim's ``status.allocation.devices.results[]``. A claim whose UID differs was deleted and
re-created under the same name since the kubelet looked (its pod is not the one asking), and a
claim without an allocation was never scheduled or was deallocated: both are refused. Results
of other drivers are not ours; a result of ours from another pool means this daemon's node name
is not the node the claim was allocated on, which is refused rather than prepared as nothing.
A result on a shared device carries its ``shareID`` and the ``queues`` it consumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.checkpoint import PreparedDevice
from kae_deviceplugin.dra.quantity import parse_whole_quantity
from kae_deviceplugin.dra.slice_devices import QUEUES
from kae_deviceplugin.errors import ClaimRefused, clipped


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        """namespace/name for logs and refusals, each clipped: the kubelet sends them as the
        API had them, and nothing we did bounded their length."""
        return f"{clipped(self.namespace)}/{clipped(self.name)}"


def _field(obj: object, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _text(result: Mapping[str, Any], key: str, ref: ClaimRef) -> str:
    value = result.get(key)
    if not isinstance(value, str) or not value:
        raise ClaimRefused(f"claim {ref}: an allocation result has no {key}")
    return value


def allocated_devices(
    claim: Mapping[str, Any], ref: ClaimRef, pool: str
) -> tuple[PreparedDevice, ...]:
    """This driver's results in ``claim`` for the pool ``pool``, or ClaimRefused saying why."""
    uid = _field(claim, "metadata", "uid")
    if uid != ref.uid:
        raise ClaimRefused(
            f"claim {ref} has UID {str(uid)[:64]}, not {clipped(ref.uid)}: it was deleted and "
            "re-created"
        )
    allocation = _field(claim, "status", "allocation")
    if not isinstance(allocation, Mapping):
        raise ClaimRefused(f"claim {ref} is not allocated")
    results = _field(allocation, "devices", "results") or []
    if not isinstance(results, list):
        raise ClaimRefused(f"claim {ref}: status.allocation.devices.results is not a list")
    devices: list[PreparedDevice] = []
    for result in results:
        if not isinstance(result, Mapping) or result.get("driver") != DRIVER:
            continue
        if _text(result, "pool", ref) != pool:
            raise ClaimRefused(
                f"claim {ref}: device {result.get('device')} is allocated from pool "
                f"{result.get('pool')}, but this node's pool is {pool} (is --node-name right?)"
            )
        share = result.get("shareID")
        devices.append(
            PreparedDevice(
                request=_text(result, "request", ref),
                pool=pool,
                device=_text(result, "device", ref),
                share_id=share if isinstance(share, str) and share else None,
                queues=_consumed_queues(result, ref),
            )
        )
    return tuple(devices)


def _consumed_queues(result: Mapping[str, Any], ref: ClaimRef) -> int | None:
    """The queues a share of a shared device took (``consumedCapacity``); None when unshared."""
    consumed = result.get("consumedCapacity")
    if consumed is None:
        return None
    if not isinstance(consumed, Mapping):
        raise ClaimRefused(f"claim {ref}: consumedCapacity is not a map")
    text = consumed.get(QUEUES, consumed.get(f"{DRIVER}/{QUEUES}"))
    if text is None:
        return None
    try:
        return parse_whole_quantity(text)
    except ValueError as err:
        raise ClaimRefused(f"claim {ref}: consumed queues: {err}") from None
