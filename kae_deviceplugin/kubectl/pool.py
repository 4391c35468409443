"""The driver's published devices and who holds them, from slices and claims (pure).

Read as the scheduler reads them: only the newest generation of each pool counts (a slice of an
older generation is on its way out), unqualified attribute names belong to the driver's domain,
and a device is held by every allocated claim whose results name it (driver, pool, device).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kae_deviceplugin.core.engines import DRA_DRIVER
from kae_deviceplugin.dra.quantity import parse_whole_quantity

JsonObject = dict[str, Any]
STANDARD_DOMAIN = "resource.kubernetes.io"
NUMA_NODE = f"{STANDARD_DOMAIN}/numaNode"
PCI_BUS_ID = f"{STANDARD_DOMAIN}/pciBusID"
# The taint keys of dra/slice_devices.py (a test keeps them equal); restated so the plugin
# never loads the driver's gRPC modules.
UNHEALTHY_TAINT_KEY = f"{DRA_DRIVER}/unhealthy"
HELD_TAINT_KEY = f"{DRA_DRIVER}/held-by-device-plugin"
QUEUES = "queues"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else self.key


@dataclass(frozen=True, slots=True)
class PoolDevice:
    """One published device: where it is, what it says about itself, and its taints."""

    node: str
    pool: str
    name: str
    attributes: Mapping[str, Any]  # qualified name -> plain value
    capacity: Mapping[str, int]  # qualified name -> whole number
    policies: Mapping[str, JsonObject]  # qualified capacity name -> its requestPolicy
    taints: tuple[Taint, ...]
    shared: bool  # allowMultipleAllocations
    driver: str = DRA_DRIVER

    def attribute(self, name: str) -> Any:
        return self.attributes.get(qualified(name, self.driver))

    @property
    def engine(self) -> str:
        return str(self.attribute("engine") or "?")

    @property
    def queues(self) -> int | None:
        return self.capacity.get(qualified(QUEUES, self.driver))

    @property
    def reasons(self) -> tuple[str, ...]:
        """The unhealthy taint's reasons (its value joins them with ``.``); empty: healthy."""
        return tuple(
            reason
            for t in self.taints
            if t.key == UNHEALTHY_TAINT_KEY
            for reason in (t.value or "unhealthy").split(".")
        )

    @property
    def held_by(self) -> str | None:
        """The device-plugin pod (``namespace.pod``) that still holds the device, if any."""
        return next((t.value for t in self.taints if t.key == HELD_TAINT_KEY), None)


@dataclass(frozen=True, slots=True)
class Hold:
    """An allocated claim's hold on a device: the claim, its pods, its request, its queues."""

    namespace: str
    claim: str
    uid: str
    request: str
    pods: tuple[str, ...]
    queues: int | None = None  # consumedCapacity.queues of a share
    # What the driver wrote in the claim's status.devices data: the queues granted (a share's,
    # or the whole function's) and the function's total; None until it has written them.
    granted: int | None = None
    total: int | None = None


@dataclass(frozen=True, slots=True)
class Pool:
    """Every device of the driver, and the holds on each (by node and device name)."""

    devices: tuple[PoolDevice, ...]
    holds: Mapping[tuple[str, str], tuple[Hold, ...]] = field(default_factory=dict)
    by_node: Mapping[str, tuple[PoolDevice, ...]] = field(default_factory=dict)

    def on(self, node: str) -> list[PoolDevice]:
        return list(self.by_node.get(node, ()))

    def holds_of(self, device: PoolDevice) -> tuple[Hold, ...]:
        return self.holds.get((device.pool, device.name), ())

    def queues_claimed(self, device: PoolDevice) -> int:
        return sum(h.queues or 0 for h in self.holds_of(device))


def qualified(name: str, driver: str = DRA_DRIVER) -> str:
    """An attribute or capacity name with its domain (unqualified ones are the driver's)."""
    return name if "/" in name else f"{driver}/{name}"


def _value(typed: Mapping[str, Any]) -> Any:
    """The one value of ``{"int": 3}``, ``{"string": ...}``, ``{"bool": ...}`` or a version."""
    return next(iter(typed.values()), None)


def _quantity(text: Any) -> int | None:
    try:
        return parse_whole_quantity(text)
    except ValueError:
        return None


def _device(spec: JsonObject, entry: JsonObject) -> PoolDevice:
    driver = str(spec.get("driver", ""))
    capacity: dict[str, int] = {}
    policies: dict[str, JsonObject] = {}
    for name, cap in (entry.get("capacity") or {}).items():
        if (value := _quantity(cap.get("value"))) is not None:
            capacity[qualified(name, driver)] = value
        if "requestPolicy" in cap:
            policies[qualified(name, driver)] = cap["requestPolicy"]
    pool = str((spec.get("pool") or {}).get("name", ""))
    return PoolDevice(
        node=str(spec.get("nodeName") or pool),
        pool=pool,
        name=str(entry.get("name", "")),
        attributes={
            qualified(k, driver): _value(v) for k, v in (entry.get("attributes") or {}).items()
        },
        capacity=capacity,
        policies=policies,
        taints=tuple(
            Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
            for t in entry.get("taints") or ()
        ),
        shared=bool(entry.get("allowMultipleAllocations")),
        driver=driver,
    )


def pool_devices(slices: Iterable[JsonObject], driver: str = DRA_DRIVER) -> list[PoolDevice]:
    """The devices of ``driver``'s slices, newest pool generation only, by node and name."""
    ours = [s.get("spec") or {} for s in slices if (s.get("spec") or {}).get("driver") == driver]
    newest: dict[str, int] = {}
    for spec in ours:
        pool = spec.get("pool") or {}
        newest[pool.get("name", "")] = max(
            newest.get(pool.get("name", ""), 0), int(pool.get("generation", 0))
        )
    devices = [
        _device(spec, entry)
        for spec in ours
        if int((spec.get("pool") or {}).get("generation", 0))
        == newest[(spec.get("pool") or {}).get("name", "")]
        for entry in spec.get("devices") or ()
    ]
    return sorted(devices, key=lambda d: (d.node, d.name))


def claim_pods(claim: JsonObject) -> tuple[str, ...]:
    """The pods a claim is reserved for (``status.reservedFor``), by name."""
    reserved = (claim.get("status") or {}).get("reservedFor") or ()
    return tuple(str(r.get("name")) for r in reserved if r.get("resource") == "pods")


def allocation_results(claim: JsonObject) -> list[JsonObject]:
    """The claim's allocation results (empty while it is not allocated)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or ())


def _status_data(claim: JsonObject, result: JsonObject) -> JsonObject:
    """The data the driver wrote for ``result`` in the claim's ``status.devices`` (or {})."""
    key = [result.get(k) for k in ("driver", "pool", "device", "shareID")]
    for entry in (claim.get("status") or {}).get("devices") or ():
        if [entry.get(k) for k in ("driver", "pool", "device", "shareID")] == key:
            data = entry.get("data")
            return data if isinstance(data, dict) else {}
    return {}


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def claim_holds(
    claims: Iterable[JsonObject], driver: str = DRA_DRIVER
) -> dict[tuple[str, str], tuple[Hold, ...]]:
    """Each (pool, device) of ``driver`` an allocated claim holds, with the claims holding it."""
    found: dict[tuple[str, str], list[Hold]] = defaultdict(list)
    for claim in claims:
        meta = claim.get("metadata") or {}
        pods = claim_pods(claim)
        for result in allocation_results(claim):
            if result.get("driver") != driver:
                continue
            consumed = (result.get("consumedCapacity") or {}).get(QUEUES)
            data = _status_data(claim, result)
            found[(str(result.get("pool")), str(result.get("device")))].append(
                Hold(
                    namespace=str(meta.get("namespace", "")),
                    claim=str(meta.get("name", "")),
                    uid=str(meta.get("uid", "")),
                    request=str(result.get("request", "")),
                    pods=pods,
                    queues=None if consumed is None else _quantity(consumed),
                    granted=_whole(data.get("queues")),
                    total=_whole(data.get("queuesTotal")),
                )
            )
    return {key: tuple(holds) for key, holds in found.items()}


def read_pool(slices: Iterable[JsonObject], claims: Iterable[JsonObject]) -> Pool:
    """The driver's pool and the holds on it, indexed by node (a fleet has thousands)."""
    devices = tuple(pool_devices(slices))
    by_node: dict[str, list[PoolDevice]] = defaultdict(list)
    for device in devices:
        by_node[device.node].append(device)
    return Pool(devices, claim_holds(claims), {n: tuple(d) for n, d in by_node.items()})
