"""Frozen domain values shared by discovery, the kubelet side, metrics and the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum


class Health(StrEnum):
    """Device health, spelled exactly as the kubelet expects it."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


class Function(StrEnum):
    """Whether a UACCE device sits on a physical or a virtual PCI function."""

    PF = "pf"
    VF = "vf"


@dataclass(frozen=True, slots=True)
class UacceDevice:
    """One UACCE device as discovery saw it in sysfs at one moment."""

    name: str
    engine: str
    resource: str
    pci_address: str
    function: Function
    parent_pf: str | None
    numa_node: int | None
    api: str | None
    flags: int | None
    algorithms: tuple[str, ...]
    available_instances: int | None
    isolate: int | None
    dev_state: int | None
    dev_node: str
    dev_node_exists: bool
    sysfs_path: str
    pci_path: str
    health: Health
    reasons: tuple[str, ...] = ()
    # The PCI function's kernel driver and its module's version (``version``, else
    # ``srcversion``); None when unbound or unknown. Fixed until a rebind, which emits a uevent.
    driver: str | None = None
    driver_version: str | None = None
    # Shared virtual addressing (issue 37): True when the device runs with SVA, False when it
    # runs without (its memory then comes from CMA), None when its flags could not be read.
    sva: bool | None = None

    @property
    def healthy(self) -> bool:
        return self.health is Health.HEALTHY

    @property
    def pf_address(self) -> str:
        """The PF this device's queues come from: itself for a PF."""
        return self.parent_pf or self.pci_address


@dataclass(frozen=True, slots=True)
class Inventory:
    """Every KAE device of a node, sorted by engine then PCI address."""

    devices: tuple[UacceDevice, ...] = ()
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def __iter__(self) -> Iterator[UacceDevice]:
        return iter(self.devices)

    def __len__(self) -> int:
        return len(self.devices)

    def for_resource(self, resource: str) -> tuple[UacceDevice, ...]:
        return tuple(device for device in self.devices if device.resource == resource)

    def by_pci_address(self) -> dict[str, UacceDevice]:
        return {device.pci_address: device for device in self.devices}

    @property
    def resources(self) -> frozenset[str]:
        return frozenset(device.resource for device in self.devices)


@dataclass(frozen=True, slots=True)
class QueueShare:
    """A shared device's queues (DRA consumable capacity): its hardware total and how many the
    prepared claims took. The kernel does not enforce the split; the metrics set the queues in
    use against ``claimed``."""

    total: int
    claimed: int
