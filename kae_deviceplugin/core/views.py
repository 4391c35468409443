"""What the kubelet sees per resource: devices filtered by the engine settings, shares expanded.

A device a DRA claim holds (``held``, by its pool device name) is advertised Unhealthy: the
kubelet then keeps it out of allocatable until the claim's pod ends, the one way the device
plugin API has to say "not free" (issue 27: a node moving back from DRA with pods running).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, get_args

from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.health import HELD_BY_DRA_CLAIM
from kae_deviceplugin.core.ids import device_ids, pool_device_name
from kae_deviceplugin.core.model import Function, Health, Inventory, UacceDevice

NOTHING_HELD: Mapping[str, str] = MappingProxyType({})

Functions = Literal["all", "pf", "vf", "prefer-vf"]
FUNCTIONS: tuple[Functions, ...] = get_args(Functions)
# The VFs each PF of an engine should have: a count, "max" (its sriov_totalvfs), or None: leave
# the node's VFs as they are.
VfProfile = int | Literal["max"] | None


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """How one engine is served: whether, how many containers per device, which PCI functions."""

    enabled: bool = True
    shares: int = 1  # how many containers may hold one device at once
    functions: Functions = "all"
    vfs: VfProfile = None  # the VF profile (daemon/vf_profiles.py); None leaves VFs alone


@dataclass(frozen=True, slots=True)
class AdvertisedDevice:
    """One kubelet device ID and the UACCE device behind it."""

    id: str
    device: UacceDevice
    share: int | None
    held_by: str | None = None  # the DRA claim holding the device, if one does

    @property
    def health(self) -> Health:
        return Health.UNHEALTHY if self.held_by is not None else self.device.health

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the kubelet is told Unhealthy: the device's faults, and a DRA claim holding it."""
        held = (HELD_BY_DRA_CLAIM,) if self.held_by is not None else ()
        return self.device.reasons + held

    @property
    def numa_node(self) -> int | None:
        return self.device.numa_node


@dataclass(frozen=True, slots=True)
class ResourceView:
    """One resource's advertised devices at one moment."""

    resource: str
    devices: tuple[AdvertisedDevice, ...] = ()
    by_id: Mapping[str, AdvertisedDevice] = field(default_factory=dict, compare=False)

    @property
    def kubelet_view(self) -> tuple[tuple[str, str, int | None], ...]:
        """Exactly what ListAndWatch carries; a change here is what the kubelet must hear."""
        return tuple((d.id, d.health.value, d.numa_node) for d in self.devices)


def select_functions(
    devices: tuple[UacceDevice, ...], functions: Functions
) -> tuple[UacceDevice, ...]:
    """Apply the PF/VF choice: all, pf, vf, or prefer-vf (VFs where the engine has any).

    prefer-vf: a PF that has spawned VFs shares its queues with them; serving both would oversell.
    """
    if functions == "pf":
        return tuple(d for d in devices if d.function is Function.PF)
    if functions == "vf":
        return tuple(d for d in devices if d.function is Function.VF)
    if functions == "prefer-vf":
        vfs = tuple(d for d in devices if d.function is Function.VF)
        return vfs or devices
    return devices


def build_view(
    resource: str,
    devices: tuple[UacceDevice, ...],
    choice: EngineSettings,
    held: Mapping[str, str] = NOTHING_HELD,
) -> ResourceView:
    """``held`` maps pool device names to the DRA claims that hold them."""
    advertised = tuple(
        AdvertisedDevice(
            device_id,
            device,
            None if choice.shares == 1 else share,
            held.get(pool_device_name(device.engine, device.pci_address)),
        )
        for device in select_functions(devices, choice.functions)
        for share, device_id in enumerate(device_ids(device.pci_address, choice.shares))
    )
    return ResourceView(resource, advertised, {d.id: d for d in advertised})


def build_views(
    inventory: Inventory,
    choices: Mapping[str, EngineSettings],
    held: Mapping[str, str] = NOTHING_HELD,
) -> dict[str, ResourceView]:
    """Views for every enabled engine, including those with no devices right now."""
    views: dict[str, ResourceView] = {}
    for engine in ENGINES:
        choice = choices.get(engine.name, EngineSettings())
        if choice.enabled:
            views[engine.resource] = build_view(
                engine.resource, inventory.for_resource(engine.resource), choice, held
            )
    return views
