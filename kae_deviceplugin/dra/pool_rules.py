"""What to write to make the API's copy of a node's pool what the inventory says (pure).

Given the slices the API holds and the ones we want, :func:`plan` returns the writes, or
nothing when they agree, so a driver at rest costs the API server nothing. The pool generation
rules (``resource.k8s.io/v1`` ResourcePool): consumers use only the slices of a pool's highest
generation, and a slice count tells them when they have all of them. So a change confined to
one slice that already exists at the pool's generation is one update of that slice at the same
generation (one write is atomic for every reader); anything more (a second changed slice, a new
or a surplus slice, slices of mixed generations) bumps the generation and writes every slice,
surplus ones deleted. These are the upstream ``resourceslice`` controller's rules too.

"Agrees" is exact while the server still holds the version we wrote (so a removal, such as a
lifted taint, is a change though the server's copy holds more than we sent); for a slice we did
not write (a restart, or someone else) it is field by field both ways, the server allowed to add
only the taints' ``timeAdded``, and a field it is known to drop (its feature gate off) is no
reason to write again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

JsonObject = dict[str, Any]


@dataclass
class Memory:
    """What the publisher remembers between reconciles."""

    generation: int = 0  # the pool generation last written or found
    # Per slice we wrote: the resourceVersion the server gave it and the content we wrote.
    written: dict[str, tuple[str, JsonObject]] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)  # fields the server did not keep


@dataclass(frozen=True, slots=True)
class Plan:
    """The writes: bodies to create or replace (a replace carries the resourceVersion it
    replaces) and slice names to delete, at pool ``generation``."""

    generation: int
    writes: tuple[JsonObject, ...]
    deletes: tuple[str, ...]


def dropped_fields(written: Any, read: Any, path: str = "") -> list[str]:
    """Paths of what ``written`` holds and ``read`` lacks or holds otherwise (read may add)."""
    if isinstance(written, Mapping) and isinstance(read, Mapping):
        return [
            missing
            for key, value in written.items()
            for missing in (
                dropped_fields(value, read[key], f"{path}.{key}")
                if key in read
                else [f"{path}.{key}"]
            )
        ]
    if isinstance(written, list) and isinstance(read, list) and len(written) == len(read):
        return [m for i, (w, r) in enumerate(zip(written, read, strict=True)) for m in
                dropped_fields(w, r, f"{path}[{i}]")]  # fmt: skip
    return [] if written == read else [path or "."]


def field_of(path: str) -> str:
    """A dropped path as a field, the same for every device: ``spec.devices[].capacity``."""
    return re.sub(r"\[\d+\]", "[]", path.lstrip("."))


def spec_of(slice_: Mapping[str, Any]) -> JsonObject:
    """A slice's spec with its devices as a list. An empty pool's slice comes back from a 1.34
    API server with ``devices: null`` (its v1 type has no omitempty) and from 1.37 without the
    key; both hold what we wrote, ``[]``."""
    spec = dict(slice_.get("spec") or {})
    if spec.get("devices") is None:
        spec["devices"] = []
    return spec


def devices_of(slice_: Mapping[str, Any]) -> list[Any]:
    devices: list[Any] = spec_of(slice_)["devices"]
    return devices


def content(slice_: Mapping[str, Any]) -> JsonObject:
    """A slice's spec without the pool generation: what a change of the inventory changes."""
    spec = spec_of(slice_)
    spec["pool"] = {k: v for k, v in spec["pool"].items() if k != "generation"}
    return {"spec": spec, "owners": slice_["metadata"].get("ownerReferences")}


def generation_of(slice_: Mapping[str, Any]) -> int:
    return int(slice_.get("spec", {}).get("pool", {}).get("generation", 0))


def keep_taint_times(body: JsonObject, old: Mapping[str, Any]) -> JsonObject:
    """``body`` with the ``timeAdded`` the server stamped on each taint ``old`` already had
    (same device, key, value and effect). The server stamps a taint written without one, so
    re-sending a slice for another device's change would otherwise restart the clock of every
    standing taint, and with it a NoExecute toleration's ``tolerationSeconds``."""
    times = {
        _taint_key(device, t): t["timeAdded"]
        for device in devices_of(old)
        for t in device.get("taints", [])
        if "timeAdded" in t
    }
    if not times:
        return body
    devices = []
    for device in body["spec"]["devices"]:
        taints = [
            {**t, "timeAdded": times[key]} if (key := _taint_key(device, t)) in times else t
            for t in device.get("taints", [])
        ]
        devices.append({**device, "taints": taints} if taints else device)
    return {**body, "spec": {**body["spec"], "devices": devices}}


def _taint_key(device: Mapping[str, Any], taint: Mapping[str, Any]) -> tuple[Any, ...]:
    return (device.get("name"), taint.get("key"), taint.get("value"), taint.get("effect"))


def without_taint_times(found: JsonObject) -> JsonObject:
    """A slice's content without the ``timeAdded`` the server stamps on each taint."""
    devices = [
        {**d, "taints": [{k: v for k, v in t.items() if k != "timeAdded"} for t in d["taints"]]}
        if d.get("taints")
        else d
        for d in devices_of(found)
    ]
    return {**found, "spec": {**found["spec"], "devices": devices}}


def same(body: JsonObject, stored: JsonObject, memory: Memory) -> bool:
    """Whether the server's ``stored`` slice already says what ``body`` says (generation aside)."""
    written = memory.written.get(body["metadata"]["name"])
    if written is not None and written[0] == stored["metadata"].get("resourceVersion"):
        return written[1] == content(body)
    if dropped_fields(without_taint_times(content(stored)), content(body)):
        return False
    return all(
        field_of(path) in memory.dropped for path in dropped_fields(content(body), content(stored))
    )


def plan(
    existing: Mapping[str, JsonObject], build: Callable[[int], Sequence[JsonObject]], memory: Memory
) -> Plan | None:
    """The writes that make ``existing`` (by name) the pool ``build(generation)`` makes; None
    when nothing needs writing."""
    generation = max([memory.generation, *map(generation_of, existing.values())])
    wanted = list(build(generation))
    names = {body["metadata"]["name"] for body in wanted}
    surplus = sorted(set(existing) - names)
    changed = [
        body
        for body in wanted
        if (old := existing.get(body["metadata"]["name"])) is None
        or generation_of(old) != generation
        or not same(body, old, memory)
    ]
    if not changed and not surplus:
        return None
    new = [b for b in changed if b["metadata"]["name"] not in existing]
    if not surplus and not new and len(changed) <= 1:
        return Plan(generation, tuple(_replacing(b, existing) for b in changed), ())
    generation += 1
    return Plan(
        generation, tuple(_replacing(b, existing) for b in build(generation)), tuple(surplus)
    )


def _replacing(body: JsonObject, existing: Mapping[str, JsonObject]) -> JsonObject:
    """``body`` as a replace of the stored slice of its name (its version, its taint times), or
    as a create when there is none."""
    old = existing.get(body["metadata"]["name"])
    if old is None:
        return body
    metadata = {**body["metadata"], "resourceVersion": old["metadata"]["resourceVersion"]}
    return keep_taint_times({**body, "metadata": metadata}, old)


def newly_dropped(written: JsonObject, read: JsonObject, known: Collection[str]) -> list[str]:
    """Fields of ``written``'s spec the server did not keep and that are not yet ``known``."""
    found = dict.fromkeys(
        field_of(p) for p in dropped_fields(spec_of(written), spec_of(read), "spec")
    )
    return [f for f in found if f not in known]
