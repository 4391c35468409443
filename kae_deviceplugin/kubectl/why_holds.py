"""What a placed pod holds: the devices of its allocated claims, and its extended resources
(from the claim the scheduler made on a DRA node, else the device plugin's count) (pure)."""

from __future__ import annotations

from typing import Any

from kae_deviceplugin.core.engines import DRA_DRIVER
from kae_deviceplugin.kubectl.cluster import pod_asks
from kae_deviceplugin.kubectl.pool import Pool, allocation_results
from kae_deviceplugin.kubectl.why_claim import ClaimAsk

JsonObject = dict[str, Any]


def _claim_holds(source: str, claim: JsonObject, pool: Pool) -> list[dict[str, Any]]:
    devices = {(d.pool, d.name): d for d in pool.devices}
    held = []
    for result in allocation_results(claim):
        if result.get("driver") != DRA_DRIVER:
            continue
        key = (str(result.get("pool")), str(result.get("device")))
        device = devices.get(key)
        held.append({
            "claim": source.removeprefix("claim "),
            "request": result.get("request"),
            "node": device.node if device else key[0],
            "device": key[1],
            "engine": device.engine if device else None,
            "healthy": bool(device and not device.reasons),
            "reasons": list(device.reasons) if device else ["not in any published slice"],
        })  # fmt: skip
    return held


def holds_of(
    pod: JsonObject, node: str, asks: list[ClaimAsk], extended: JsonObject | None, pool: Pool
) -> list[dict[str, Any]]:
    """One entry per device or extended resource the pod on ``node`` holds."""
    held = []
    for ask in asks:
        if ask.claim is not None:
            held += _claim_holds(ask.source, ask.claim, pool)
    if extended is not None:
        meta = extended.get("metadata") or {}
        held += _claim_holds(f"claim {meta.get('namespace')}/{meta.get('name')}", extended, pool)
    elif asked := pod_asks(pod):
        held += [{"resource": r, "count": n, "node": node} for r, n in sorted(asked.items())]
    return held


def hold_text(hold: dict[str, Any]) -> str:
    """One line for the table form."""
    if "resource" in hold:
        return f"{hold['count']} {hold['resource']} on {hold['node']} (device plugin)"
    health = "healthy" if hold["healthy"] else "unhealthy: " + ", ".join(hold["reasons"])
    return (
        f"{hold['node']}/{hold['device']} ({hold['engine']}, {health}) "
        f"for request {hold['request']} of {hold['claim']}"
    )
