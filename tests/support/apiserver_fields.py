"""What both test API servers (the in-memory one and the HTTP one) do to objects' fields:
read a dotted path, drop one (a server whose feature gate is off keeps nothing of it), and the
real server's defaulting of a ResourceSlice device taint's ``timeAdded``."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

JsonObject = dict[str, Any]


def at(obj: Mapping[str, Any], dotted: str) -> Any:
    """The value at ``spec.nodeName``-style ``dotted`` in ``obj``, None where a part is missing."""
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def drop(obj: JsonObject, dotted: str) -> None:
    """Remove the field at ``dotted``; a list on the way applies it to every item of the list
    (``spec.devices.taints`` drops every device's taints)."""
    *parents, last = dotted.split(".")
    targets: list[Any] = [obj]
    for part in parents:
        found = [t.get(part) for t in targets if isinstance(t, dict)]
        targets = [i for f in found for i in (f if isinstance(f, list) else [f])]
    for item in targets:
        if isinstance(item, dict):
            item.pop(last, None)


def now_rfc3339() -> str:
    """The time now as the API server writes timestamps (seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp_taints(obj: JsonObject) -> None:
    """The real server's defaulting: a device taint without ``timeAdded`` gets the time now."""
    now = now_rfc3339()
    spec = obj.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    for device in devices if isinstance(devices, list) else []:
        for taint in device.get("taints", []) if isinstance(device, dict) else []:
            if isinstance(taint, dict):
                taint.setdefault("timeAdded", now)
