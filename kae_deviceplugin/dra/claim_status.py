"""What a prepared claim's ``status.devices`` says about each of its devices here (pure).

``kubectl get resourceclaim -o yaml`` then shows which KAE function a claim got and whether it
is healthy, without reading slices: per device, ``data`` holds the device's facts (engine, uacce
name, NUMA node, PCI address), the queues granted (``queues``: a share's, or the whole function
for an exclusive device) with the function's total (``queuesTotal``), and two conditions:
``Ready`` (prepared: its CDI spec is written, as the API asks of a driver) and ``Healthy``, kept
current as the device changes, with the reasons of an unhealthy one. A condition's
``lastTransitionTime`` moves only when its status does, so a re-write for another device's
change keeps it.

The queues in use are not written here: they move whenever a process opens or closes a queue,
and each move would be a write to the API server; ``kae_device_queues_in_use`` has them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kae_deviceplugin.core.model import UacceDevice
from kae_deviceplugin.dra.checkpoint import PreparedClaim, PreparedDevice

JsonObject = dict[str, Any]
READY = "Ready"
HEALTHY = "Healthy"


def _reason(reasons: tuple[str, ...]) -> str:
    """The first reason as a condition reason (CamelCase: ``dev-node-missing`` is
    ``DevNodeMissing``)."""
    first = reasons[0] if reasons else "unhealthy"
    return "".join(part.capitalize() for part in first.replace("_", "-").split("-") if part)


def _condition(kind: str, ok: bool, reason: str, message: str, since: str) -> JsonObject:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


def _conditions(device: UacceDevice | None, now: str, before: Mapping[str, Any]) -> list[Any]:
    if device is None:
        health = (False, "NotOnNode", "the device is no longer on this node")
    elif device.healthy:
        health = (True, "DeviceHealthy", "the device is healthy")
    else:
        health = (False, _reason(device.reasons), ", ".join(device.reasons) or "unhealthy")
    wanted = [
        (READY, True, "Prepared", "the claim's CDI spec is written on the node"),
        (HEALTHY, *health),
    ]
    previous = {c.get("type"): c for c in before.get("conditions", [])}
    conditions = []
    for kind, ok, reason, message in wanted:
        old = previous.get(kind, {})
        same = old.get("status") == ("True" if ok else "False")
        conditions.append(_condition(kind, ok, reason, message, old["lastTransitionTime"]
                                     if same and "lastTransitionTime" in old else now))  # fmt: skip
    return conditions


def _data(result: PreparedDevice, device: UacceDevice | None, total: int | None) -> JsonObject:
    data: JsonObject = {}
    if device is not None:
        data = {"engine": device.engine, "uacceName": device.name, "pciBusID": device.pci_address}
        if device.numa_node is not None:
            data["numaNode"] = device.numa_node
    granted = result.queues if result.queues is not None or device is None else total
    if granted is not None:
        data["queues"] = granted
    if device is not None and total is not None:
        data["queuesTotal"] = total
    return data


def key_of(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    """An entry's identity in the list (its map keys in the API)."""
    return (entry.get("driver"), entry.get("pool"), entry.get("device"), entry.get("shareID"))


def device_statuses(
    driver: str,
    claim: PreparedClaim,
    devices: Mapping[str, UacceDevice],
    now: str,
    before: list[JsonObject] | None = None,
    *,
    totals: Mapping[str, int] | None = None,
) -> list[JsonObject]:
    """The claim's ``status.devices`` entries of this driver; ``devices`` maps pool device names
    to the inventory's devices, ``before`` is what was written last (its transition times),
    ``totals`` each function's queue total by PCI address."""
    previous = {key_of(e): e for e in before or []}
    entries = []
    for result in claim.devices:
        entry: JsonObject = {"driver": driver, "pool": result.pool, "device": result.device}
        if result.share_id is not None:
            entry["shareID"] = result.share_id
        device = devices.get(result.device)
        entry["conditions"] = _conditions(device, now, previous.get(key_of(entry), {}))
        total = None if device is None else (totals or {}).get(device.pci_address)
        entry["data"] = _data(result, device, total)
        entries.append(entry)
    return entries


def without_times(entries: list[JsonObject]) -> list[JsonObject]:
    """Entries without their conditions' times: what decides whether a write is needed."""
    return [
        {**e, "conditions": [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                             for c in e.get("conditions", [])]}
        for e in entries
    ]  # fmt: skip
