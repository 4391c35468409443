"""A pod's claim against one node: each request, then the claim's constraints (pure).

``matchAttribute`` holds when one value of the attribute offers every request of the
constraint its count of devices, no device serving two requests (a small bipartite matching,
the sizes being a node's few devices). ``distinctAttribute`` is not judged (alpha in 1.37).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kae_deviceplugin.kubectl.pool import PoolDevice, allocation_results, qualified
from kae_deviceplugin.kubectl.why_request import Context, RequestResult, request_result

JsonObject = dict[str, Any]
_WORDS: dict[int, object] = {2: "two", 3: "three", 4: "four", 5: "five"}


@dataclass(frozen=True)
class ClaimAsk:
    """One entry of the pod's ``resourceClaims`` (or its extended resources), resolved."""

    pod_claim: str  # the name in pod.spec.resourceClaims (the resource for extended ones)
    source: str  # "claim ns/name", "template ns/name" or "extended resource <name>"
    devices: JsonObject  # the claim's spec.devices: requests and constraints
    claim: JsonObject | None = None  # the ResourceClaim, once it exists
    problem: str | None = None  # why it cannot be judged (its claim or template is missing)

    @property
    def allocated_on(self) -> set[str]:
        """The pools (nodes) an allocated claim's devices are in; empty: not allocated."""
        return {str(r.get("pool")) for r in allocation_results(self.claim or {})}


@dataclass
class ClaimResult:
    ask: ClaimAsk
    ok: bool
    requests: list[RequestResult] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def _assignable(slots: Sequence[list[PoolDevice]]) -> bool:
    """Whether each slot gets a device of its own list, no device twice (augmenting paths)."""
    owner: dict[tuple[str, str], int] = {}

    def place(slot: int, seen: set[tuple[str, str]]) -> bool:
        for device in slots[slot]:
            key = (device.node, device.name)
            if key in seen:
                continue
            seen.add(key)
            if key not in owner or place(owner[key], seen):
                owner[key] = slot
                return True
        return False

    return all(place(slot, set()) for slot in range(len(slots)))


def _match_line(attribute: str, results: Sequence[RequestResult]) -> str | None:
    """None when some value of ``attribute`` serves every request, else why not."""
    values = {d.attribute(qualified(attribute, d.driver)) for r in results for d in r.usable} - {
        None
    }
    for value in sorted(values, key=str):
        slots = [
            [d for d in r.usable if d.attribute(qualified(attribute, d.driver)) == value]
            for r in results
            for _ in range(r.needed)
        ]
        if _assignable(slots):
            return None
    needed = sum(r.needed for r in results)
    offered = "; ".join(
        f"{r.name}: {_short(attribute)} "
        + (", ".join(sorted({str(d.attribute(qualified(attribute, d.driver))) for d in r.usable})))
        for r in results
    )
    return f"no {_WORDS.get(needed, needed)} devices meet matchAttribute {attribute} ({offered})"


def _short(attribute: str) -> str:
    return attribute.rpartition("/")[2]


def claim_result(
    ask: ClaimAsk, node: str, devices: list[PoolDevice], context: Context
) -> ClaimResult:
    """Whether ``ask`` fits on ``node``, with the lines that say why not."""
    if ask.problem is not None:
        return ClaimResult(ask, False, lines=[ask.problem])
    if ask.allocated_on:
        on = sorted(ask.allocated_on)
        ok = node in on
        line = f"allocated on {', '.join(on)}"
        return ClaimResult(ask, ok, lines=[] if ok else [line + ": the pod can only go there"])
    requests = [request_result(r, devices, context) for r in ask.devices.get("requests") or ()]
    result = ClaimResult(ask, all(r.ok for r in requests), requests)
    # A constraint names a request, or a firstAvailable subrequest as <request>/<sub>.
    by_name = {r.name.partition("/")[0]: r for r in requests} | {r.name: r for r in requests}
    for constraint in ask.devices.get("constraints") or ():
        attribute = constraint.get("matchAttribute")
        names = [str(n) for n in constraint.get("requests") or [r.name for r in requests]]
        judged = [by_name[n] for n in names if n in by_name]
        if not attribute or not all(r.ok for r in judged) or len(judged) < 1:
            continue
        refusal = _match_line(str(attribute), judged)
        if refusal is not None:
            result.ok = False
            result.lines.append(refusal)
    return result
