"""One request of a claim against one node's devices: what each step leaves (pure).

The scheduler's order for a request: the DeviceClass's selectors, then the request's, then the
devices it may not take (a taint the request does not tolerate, an exclusive device another
claim holds, a share with too few queues left), then the count. Each step that removes devices
says how many it left and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kae_deviceplugin.dra.quantity import parse_whole_quantity
from kae_deviceplugin.kubectl.cel import Selectors
from kae_deviceplugin.kubectl.pool import QUEUES, Hold, Pool, PoolDevice, Taint, qualified

JsonObject = dict[str, Any]
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Context:
    """What every request is judged against: the classes, the pool, the pod's own claims."""

    classes: Mapping[str, JsonObject]
    pool: Pool
    selectors: Selectors
    own_claims: frozenset[str] = frozenset()  # UIDs: their holds are the pod's own


@dataclass
class RequestResult:
    name: str
    ok: bool
    lines: list[str] = field(default_factory=list)
    usable: list[PoolDevice] = field(default_factory=list)
    needed: int = 1


def tolerated(taint: Taint, tolerations: Sequence[JsonObject]) -> bool:
    """Whether a toleration of the request (or pod) matches ``taint`` (the API's rules)."""
    for tol in tolerations:
        if tol.get("effect") and tol.get("effect") != taint.effect:
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol.get("key") == taint.key:
                return True
        elif tol.get("key") == taint.key and (tol.get("value") or "") == taint.value:
            return True
    return False


def _quantity(text: Any) -> int | None:
    try:
        return None if text is None else parse_whole_quantity(str(text))
    except ValueError:
        return None


def _holders(holds: Sequence[Hold]) -> str:
    return ", ".join(
        f"{h.namespace}/{h.claim}" + (f" (pod {', '.join(h.pods)})" if h.pods else "")
        for h in holds
    )


def _queue_block(device: PoolDevice, asked: int | None, others: Sequence[Hold]) -> str | None:
    total = device.queues
    if not device.shared:
        if asked is not None and total is not None and asked > total:
            return f"asks {asked} queues, the device has {total}"
        return None
    policy = device.policies.get(qualified(QUEUES, device.driver)) or {}
    ask = asked if asked is not None else (_quantity(policy.get("default")) or total or 1)
    most = _quantity((policy.get("validRange") or {}).get("max"))
    over = f" (a claim may take at most {most})" if most is not None and ask > most else ""
    free = max((total or 0) - sum(h.queues or 0 for h in others), 0)
    if ask > free:
        return f"asks {ask} queues, {free} free{over}"
    return f"asks {ask} queues{over}" if over else None


def blocked(device: PoolDevice, exact: JsonObject, context: Context) -> str | None:
    """Why the request cannot take ``device`` although it is selected; None: it can."""
    tolerations = exact.get("tolerations") or ()
    for taint in device.taints:
        if taint.effect in BLOCKING_EFFECTS and not tolerated(taint, tolerations):
            return f"tainted {taint.key}={taint.value}" if taint.value else f"tainted {taint.key}"
    others = [h for h in context.pool.holds_of(device) if h.uid not in context.own_claims]
    if others and not device.shared:
        return f"allocated to {_holders(others)}"
    asked = _quantity(((exact.get("capacity") or {}).get("requests") or {}).get(QUEUES))
    return _queue_block(device, asked, others)


def _engines(devices: Sequence[PoolDevice]) -> str:
    engines = {d.engine for d in devices}
    return f"{engines.pop()} " if len(engines) == 1 else ""


def _select(
    devices: list[PoolDevice], expression: str, context: Context
) -> tuple[list[PoolDevice], str]:
    selector = context.selectors[expression]
    verdicts = [(d, selector.evaluate(d)) for d in devices]
    passed = [d for d, v in verdicts if v.passed]
    line = f"{len(devices)} {_engines(devices)}devices, {len(passed)} pass `{expression}`"
    errors = sorted({v.error for _, v in verdicts if v.error})
    if errors:
        failing = sum(1 for _, v in verdicts if v.error)
        line += f"; fails on {failing}: {'; '.join(errors)}"
    return passed, line


def _expressions(selectors: Sequence[JsonObject] | None) -> list[str]:
    return [str((s.get("cel") or {}).get("expression", "")) for s in selectors or ()]


def exact_request(
    name: str, exact: JsonObject, devices: list[PoolDevice], context: Context
) -> RequestResult:
    """An ``exactly`` request (or one subrequest of ``firstAvailable``) on ``devices``."""
    class_name = str(exact.get("deviceClassName", ""))
    device_class = context.classes.get(class_name)
    if device_class is None:
        return RequestResult(name, False, [f"DeviceClass {class_name} does not exist"])
    result = RequestResult(name, False)
    candidates = devices
    for expression in _expressions((device_class.get("spec") or {}).get("selectors")):
        candidates, line = _select(candidates, expression, context)
        result.lines.append(f"class {class_name}: {line}")
    for expression in _expressions(exact.get("selectors")):
        candidates, line = _select(candidates, expression, context)
        result.lines.append(line)
    for device in candidates:
        reason = blocked(device, exact, context)
        if reason is None:
            result.usable.append(device)
        else:
            result.lines.append(f"{device.name} {reason}")
    every = exact.get("allocationMode") == "All"
    result.needed = len(candidates) if every else int(exact.get("count") or 1)
    enough = len(result.usable) >= result.needed
    result.ok = (
        enough and result.needed > 0 and (not every or len(result.usable) == len(candidates))
    )
    if not result.ok:
        result.lines.append(_shortfall(result, every, len(candidates)))
    return result


def _shortfall(result: RequestResult, every: bool, matching: int) -> str:
    if every:
        return f"allocationMode All: {matching} devices match, {len(result.usable)} usable"
    return f"needs {result.needed}, {len(result.usable)} usable"


def request_result(
    request: JsonObject, devices: list[PoolDevice], context: Context
) -> RequestResult:
    """A claim's request: ``exactly``, or the first ``firstAvailable`` subrequest that fits."""
    name = str(request.get("name", ""))
    if "exactly" in request:
        return exact_request(name, request["exactly"], devices, context)
    tried = []
    for sub in request.get("firstAvailable") or ():
        result = exact_request(f"{name}/{sub.get('name', '')}", sub, devices, context)
        if result.ok:
            return result
        tried.append(result)
    lines = [f"{r.name}: {line}" for r in tried for line in r.lines]
    return RequestResult(name, False, lines or ["has neither exactly nor firstAvailable"])
