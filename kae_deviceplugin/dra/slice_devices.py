"""One KAE device as a ResourceSlice device: its name, attributes, capacity and taints (pure).

Attribute rules (issues 20 and 31), and why:

* Our own attributes are unqualified: the API puts them in the driver's domain
  (``device.attributes["kae.openfuyao.com"].engine``), and a 1.38 change refuses attributes
  qualified with the driver's own domain.
* A device carries only what a selector or a constraint picks devices by: ``engine``,
  ``function``, ``sva`` (issue 37: whether the device runs with shared virtual addressing, which
  decides where a process's queue memory comes from, so a workload built for one model selects
  it), the ``alg_*`` family, and the standard ``pciBusID``, ``pcieRoot`` and ``numaNode``.
  The scheduler converts every attribute and capacity of every device into CEL values at each
  selector it evaluates, on every node it tries, whatever the selector reads;
  the uacce name, the QM ``api``, the driver version and a VF's PF made a node cost its
  allocator 1.33x a slice of bare devices, and 1.12x without them (issue 31,
  benchmarks/sched_alloc.py). Facts every device of a node shares (``api``, the driver
  version) are node labels (observability/nfd.py), for node affinity; the uacce name is in
  the claim's status ``data`` (claim_status.py), where the pod's owner reads it.
* ``queues`` is published only on the devices of a shared engine, where claims consume it:
  a whole device's queue total is nothing a claim asks for (``kubectl kae`` and ``list``
  show it from the node).
* ``alg_<name>`` is a bool per algorithm. A CEL selector naming a key a device lacks is a
  runtime error that fails the pod's scheduling, and a DeviceClass is evaluated against every
  device of the driver on every node. So every device of an engine carries the same fixed set of
  ``alg_*`` keys, the engine's whole family from :data:`ALGORITHM_FAMILIES`, ``false`` where the
  kernel does not list it. The family cannot come from what this node shows (another node's
  kernel may list more), so it is a table: the V2 algorithms of ``core/engines.py`` (what the
  device plugin already serves) plus the names the mainline HiSilicon drivers can print in
  ``algorithms`` (``hpre_dev_algs``, ``sec_dev_algs``, ``zip_dev_algs``). An algorithm a device
  lists beyond its family is published too (``true``); selectors on such a name need ``has()``.
* At most 32 attributes and capacities: the fixed keys and the family take at most 14; names a
  device lists beyond that are dropped last-first (and noted). The values are short by
  construction (names, PCI addresses), so none needs cutting.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.ids import pool_device_name
from kae_deviceplugin.core.model import Function, UacceDevice
from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.quantity import format_quantity

MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_IDENTIFIER_LENGTH = 32
MAX_LABEL_VALUE_LENGTH = 63
STANDARD_PREFIX = "resource.kubernetes.io/"
PCI_BUS_ID = STANDARD_PREFIX + "pciBusID"
PCIE_ROOT = STANDARD_PREFIX + "pcieRoot"
NUMA_NODE = STANDARD_PREFIX + "numaNode"
QUEUES = "queues"
SVA = "sva"
UNHEALTHY_TAINT_KEY = f"{DRIVER}/unhealthy"
HELD_TAINT_KEY = f"{DRIVER}/held-by-device-plugin"
MIN_SHARED_QUEUES = 2

TaintEffect = Literal["NoSchedule", "NoExecute", "None"]
TAINT_EFFECTS: tuple[TaintEffect, ...] = ("NoSchedule", "NoExecute", "None")

# The kernel drivers' algorithm tables (mainline drivers/crypto/hisilicon/*/..._main.c), after
# the V2 set of core/engines.py. Order is the publishing order.
_KERNEL_ALGORITHMS: dict[str, tuple[str, ...]] = {
    "hpre": ("rsa", "dh", "ecdh", "x25519", "x448", "ecdsa", "sm2"),
    "sec": ("cipher", "digest", "aead"),
    "zip": ("zlib", "gzip", "deflate", "lz77_zstd", "lz77_only", "lz4"),
}
ALGORITHM_FAMILIES: dict[str, tuple[str, ...]] = {
    engine.name: tuple(
        dict.fromkeys((*engine.algorithms, *_KERNEL_ALGORITHMS.get(engine.name, ())))
    )
    for engine in ENGINES
}

_NOT_IDENTIFIER = re.compile(r"[^a-z0-9_]")
_PCIE_ROOT = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")
_LABEL_END = re.compile(r"[^A-Za-z0-9]+$")


@dataclass(frozen=True, slots=True)
class DeviceOptions:
    """What to publish beyond the description: taints and sharing (issue 21)."""

    taint_effect: TaintEffect | None = None  # None: an unhealthy device is not published
    shared_engines: frozenset[str] = frozenset()  # engines whose queues are consumable capacity
    # Device name -> the device-plugin pod (``<namespace>/<pod>``) that holds the device (issue
    # 27: a node that moved from the device plugin with pods running). Published with the held
    # taint, or left out where the slices carry no taints (taint_effect None): never as free.
    held: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RenderedDevice:
    """A slice device as JSON-able data, and what had to be cut or left out to publish it."""

    entry: dict[str, Any]
    notes: tuple[str, ...] = field(default=())


def device_name(device: UacceDevice) -> str:
    """The device's name in the pool: a DNS label from the PCI address, never the uacce index
    (the rule is core.ids.pool_device_name, which the device plugin reads too)."""
    return pool_device_name(device.engine, device.pci_address)


def algorithm_attribute(algorithm: str) -> str:
    """``alg_<name>``: lower case, every character outside ``[a-z0-9_]`` as ``_``."""
    return "alg_" + _NOT_IDENTIFIER.sub("_", algorithm.lower())


def pcie_root(pci_path: str) -> str | None:
    """The PCIe root complex (``pci0000:78``): the ``pci<dom>:<bus>`` directory under
    ``devices/`` on the function's sysfs path, as k8s.io/dynamic-resource-allocation names it."""
    parts = pci_path.split("/")
    for index in range(len(parts) - 1, 0, -1):
        if parts[index - 1] == "devices" and _PCIE_ROOT.fullmatch(parts[index]):
            return parts[index]
    return None


def queues_policy(total: int) -> dict[str, Any]:
    """How claims take a shared device's queues: 1 unless they say, any whole number up to the
    total (resource.k8s.io/v1 CapacityRequestPolicy, quantities as strings)."""
    return {"default": "1", "validRange": {"min": "1", "max": format_quantity(total), "step": "1"}}


def label_value(text: str, fallback: str) -> str:
    """``text`` cut to a valid label value (63 characters, ending in a letter or digit)."""
    return _LABEL_END.sub("", text[:MAX_LABEL_VALUE_LENGTH]) or fallback


def unhealthy_taint(device: UacceDevice, effect: TaintEffect) -> dict[str, str]:
    """The taint of an unhealthy device; the value (a label value) names its reasons."""
    value = label_value(".".join(device.reasons), "unhealthy")
    return {"key": UNHEALTHY_TAINT_KEY, "value": value, "effect": effect}


def held_taint(holder: str) -> dict[str, str]:
    """The taint of a device a device-plugin pod holds; the value names the holder.

    Always NoSchedule, whatever the unhealthy taint's effect: it keeps new claims off the
    device, and no claim can rightly hold it already, so there is nothing to evict.
    """
    value = label_value(holder.replace("/", "."), "held")  # a namespace holds no "."
    return {"key": HELD_TAINT_KEY, "value": value, "effect": "NoSchedule"}


def _described(device: UacceDevice) -> dict[str, dict[str, Any]]:
    attributes: dict[str, dict[str, Any]] = {
        "engine": {"string": device.engine},
        "function": {"string": "vf" if device.function is Function.VF else "pf"},
        # Issue 37: a workload built for one memory model picks it (``sva == true``); false where
        # the device runs without SVA or its flags are unknown, so the key is never missing.
        SVA: {"bool": device.sva is True},
        PCI_BUS_ID: {"string": device.pci_address},
    }
    root = pcie_root(device.pci_path)
    if root is not None:
        attributes[PCIE_ROOT] = {"string": root}
    if device.numa_node is not None:
        attributes[NUMA_NODE] = {"int": device.numa_node}
    return attributes


def _algorithms(device: UacceDevice, room: int, notes: list[str]) -> dict[str, dict[str, Any]]:
    listed = {algorithm_attribute(a) for a in device.algorithms}
    family = [algorithm_attribute(a) for a in ALGORITHM_FAMILIES.get(device.engine, ())]
    extra = sorted(listed - set(family))
    too_long = [name for name in extra if len(name) > MAX_IDENTIFIER_LENGTH]
    notes.extend(
        f"algorithm attribute {name[:40]} is longer than 32: left out" for name in too_long
    )
    names = family + [name for name in extra if name not in too_long]
    if len(names) > room:
        notes.append(f"{len(names) - room} algorithm attributes left out (32 per device)")
        names = names[:room]
    return {name: {"bool": name in listed} for name in names}


def share_limit(
    device: UacceDevice, queues: int | None, shared_engines: frozenset[str]
) -> int | str:
    """The queues a device with ``queues`` hardware queues (None: unknown) publishes for
    shares to consume, or why it publishes none (it is not shared)."""
    if device.engine not in shared_engines:
        return f"engine {device.engine} is not in dra.sharedEngines"
    if queues is None or queues < MIN_SHARED_QUEUES:
        # The API wants min + step <= the capacity; a device of one queue has nothing to split.
        known = "unknown" if queues is None else f"{queues}, fewer than {MIN_SHARED_QUEUES}"
        return f"queue total {known}: not shared"
    return queues


def render_device(
    device: UacceDevice, queues: int | None, options: DeviceOptions
) -> RenderedDevice:
    """The slice device for ``device`` with ``queues`` hardware queues (None: unknown)."""
    notes: list[str] = []
    attributes = _described(device)
    capacity: dict[str, dict[str, Any]] = {}
    limit = share_limit(device, queues, options.shared_engines)
    shared = isinstance(limit, int)
    if device.engine in options.shared_engines and isinstance(limit, str):
        notes.append(limit)
    if shared and queues is not None:
        capacity[QUEUES] = {
            "value": format_quantity(queues),
            "requestPolicy": queues_policy(queues),
        }
    room = MAX_ATTRIBUTES_AND_CAPACITIES - len(attributes) - len(capacity)
    attributes.update(_algorithms(device, room, notes))
    entry: dict[str, Any] = {"name": device_name(device), "attributes": attributes}
    if capacity:
        entry["capacity"] = capacity
    if shared:
        entry["allowMultipleAllocations"] = True
    if options.taint_effect is not None:
        taints = [unhealthy_taint(device, options.taint_effect)] if not device.healthy else []
        if (holder := options.held.get(entry["name"])) is not None:
            taints.append(held_taint(holder))
        if taints:
            entry["taints"] = taints
    return RenderedDevice(entry, tuple(f"{entry['name']}: {n}" for n in notes))


def render_devices(
    devices: Iterable[UacceDevice], queues: Mapping[str, int], options: DeviceOptions
) -> list[RenderedDevice]:
    """The published devices in order; unhealthy and held ones are left out unless they get a
    taint."""
    tainting = options.taint_effect is not None
    return [
        render_device(d, queues.get(d.pci_address), options)
        for d in devices
        if tainting or (d.healthy and device_name(d) not in options.held)
    ]
