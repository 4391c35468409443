"""The scheduler's DRA allocator for one node, emulated from the resource.k8s.io/v1 API.

Given the node's ResourceSlices (as the API server stores them), DeviceClasses and a claim's
``spec.devices``, it finds what the scheduler would allocate: per request (in order, ``count``
devices each, ExactCount), devices of a complete pool that pass the class's and the request's
CEL selectors and carry no NoSchedule or NoExecute taint, none used twice, and then every
``matchAttribute`` constraint (the named attribute present on each device of the constrained
requests, with one value); where a choice breaks a constraint it backtracks, as the scheduler's
allocator does. The result is ``status.allocation.devices.results``.

The selectors are CEL, evaluated here for the subset KAE's DeviceClasses and documented claims
use: terms joined by ``&&``, each ``device.driver == "<text>"``,
``device.attributes["<domain>"].<name>`` (a bool) or that ``== <literal>`` (a string, an int,
``true``/``false``). Anything else is refused (``Unsupported``), never guessed. As in CEL, a
selector naming an attribute a device lacks, or comparing across types, is an error
(``SelectorError``): the scheduler then fails the claim rather than skipping the device.

Written from the API, not from the driver: it imports nothing of it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Device = Mapping[str, Any]
REFUSING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_DRIVER_TERM = re.compile(r'device\.driver\s*==\s*"([^"\\]*)"')
_ATTRIBUTE_TERM = re.compile(
    r'device\.attributes\["([^"\\]+)"\]\.([A-Za-z_][A-Za-z0-9_]*)(?:\s*==\s*(.+))?'
)
_LITERAL = re.compile(r'"([^"\\]*)"|(-?[0-9]+)|(true|false)')


class _Version(str):
    """A ``version`` attribute: CEL compares it with semver functions, never with a string."""

    __slots__ = ()


class Unsupported(ValueError):
    """A selector or request beyond what this emulator evaluates."""


class SelectorError(ValueError):
    """A selector CEL cannot evaluate on a device (a missing key, a type mismatch)."""


@dataclass(frozen=True)
class Candidate:
    """A device of a pool, as the allocator sees it."""

    driver: str
    pool: str
    entry: Device

    @property
    def name(self) -> str:
        return str(self.entry["name"])

    def attribute(self, domain: str, name: str) -> object:
        """The attribute's value; KeyError where the device has none. Unqualified names in a
        slice belong to its driver's domain."""
        attributes = self.entry.get("attributes", {})
        key = name if domain == self.driver and name in attributes else f"{domain}/{name}"
        value = attributes[key]
        if "version" in value:
            return _Version(value["version"])
        for kind in ("bool", "int", "string"):
            if kind in value:
                return value[kind]
        raise KeyError(key)


def _literal(text: str) -> object:
    match = _LITERAL.fullmatch(text.strip())
    if match is None:
        raise Unsupported(f"literal {text!r}")
    string, number, boolean = match.groups()
    if string is not None:
        return string
    return int(number) if number is not None else boolean == "true"


def _term(term: str, device: Candidate) -> bool:
    if (match := _DRIVER_TERM.fullmatch(term)) is not None:
        return device.driver == match.group(1)
    match = _ATTRIBUTE_TERM.fullmatch(term)
    if match is None:
        raise Unsupported(f"CEL term {term!r}")
    domain, name, compared = match.groups()
    try:
        value = device.attribute(domain, name)
    except KeyError:
        raise SelectorError(f"{device.name}: no such key: {domain}/{name}") from None
    if compared is None:
        if not isinstance(value, bool):
            raise SelectorError(f"{device.name}: {domain}/{name} is no bool")
        return value
    wanted = _literal(compared)
    if type(wanted) is not type(value):
        raise SelectorError(f"{device.name}: no such overload: {value!r} == {wanted!r}")
    return value == wanted


def matches(expression: str, device: Candidate) -> bool:
    """Whether ``device`` passes the CEL ``expression`` (the subset above)."""
    if any(operator in expression for operator in ("||", "(", "!")):
        raise Unsupported(f"CEL expression {expression!r}")
    return all(_term(term.strip(), device) for term in expression.split("&&"))


def complete_pools(slices: Sequence[Mapping[str, Any]]) -> Iterator[Candidate]:
    """The devices of every pool whose slices at its newest generation are all there: the
    scheduler allocates nothing from an incomplete pool."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for obj in slices:
        spec = obj["spec"]
        pools.setdefault((spec["driver"], spec["pool"]["name"]), []).append(spec)
    for (driver, pool), specs in pools.items():
        newest = max(s["pool"]["generation"] for s in specs)
        current = [s for s in specs if s["pool"]["generation"] == newest]
        if all(s["pool"]["resourceSliceCount"] == len(current) for s in current):
            for spec in current:
                for entry in spec.get("devices", []):
                    yield Candidate(driver, pool, entry)


def _selectors(spec: Mapping[str, Any]) -> list[str]:
    return [s["cel"]["expression"] for s in spec.get("selectors", [])]


def _eligible(
    request: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]], pool: list[Candidate]
) -> list[Candidate]:
    exactly = request.get("exactly")
    if exactly is None or exactly.get("allocationMode", "ExactCount") != "ExactCount":
        raise Unsupported(f"request {request.get('name')}: only exactly, ExactCount")
    if "capacity" in exactly or "tolerations" in exactly:
        raise Unsupported(f"request {request['name']}: capacity requests and tolerations")
    wanted = _selectors(classes[exactly["deviceClassName"]]) + _selectors(exactly)
    untainted = [
        d
        for d in pool
        if not any(t["effect"] in REFUSING_EFFECTS for t in d.entry.get("taints", []))
    ]
    return [d for d in untainted if all(matches(w, d) for w in wanted)]


def _constrained(claim: Mapping[str, Any], chosen: Sequence[tuple[str, Candidate]]) -> bool:
    """Every matchAttribute constraint holds for what is chosen so far."""
    for constraint in claim.get("constraints", []):
        domain, _, name = constraint["matchAttribute"].rpartition("/")
        requests = constraint.get("requests")
        values = set()
        for request, device in chosen:
            if requests and request not in requests:
                continue
            try:
                values.add(repr(device.attribute(domain, name)))
            except KeyError:
                return False  # a device without the attribute never satisfies it
        if len(values) > 1:
            return False
    return True


def allocate(
    claim: Mapping[str, Any],
    slices: Sequence[Mapping[str, Any]],
    classes: Mapping[str, Mapping[str, Any]],
) -> list[dict[str, str]] | None:
    """The allocation results for ``claim`` (a ResourceClaim's ``spec.devices``), or None when
    no choice of devices satisfies it. Raises Unsupported or SelectorError as described above."""
    pool = list(complete_pools(slices))
    slots = [
        (request["name"], _eligible(request, classes, pool))
        for request in claim["requests"]
        for _ in range(request["exactly"].get("count", 1))
    ]
    found = _search(claim, slots, [])
    if found is None:
        return None
    return [
        {"request": request, "driver": d.driver, "pool": d.pool, "device": d.name}
        for request, d in found
    ]


def _search(
    claim: Mapping[str, Any],
    slots: Sequence[tuple[str, list[Candidate]]],
    chosen: list[tuple[str, Candidate]],
) -> list[tuple[str, Candidate]] | None:
    if len(chosen) == len(slots):
        return chosen
    request, candidates = slots[len(chosen)]
    taken = {(d.pool, d.name) for _, d in chosen}
    for device in candidates:
        if (device.pool, device.name) in taken:
            continue
        attempt = [*chosen, (request, device)]
        if _constrained(claim, attempt) and (done := _search(claim, slots, attempt)):
            return done
    return None
