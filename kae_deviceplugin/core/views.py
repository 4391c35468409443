"""What the kubelet sees per resource: devices filtered by the engine settings, shares expanded."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.ids import device_ids
from kae_deviceplugin.core.model import Function, Health, Inventory, UacceDevice

Functions = Literal["all", "pf", "vf", "prefer-vf"]
FUNCTIONS: tuple[Functions, ...] = get_args(Functions)


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """How one engine is served: whether, how many containers per device, which PCI functions."""

    enabled: bool = True
    shares: int = 1  # how many containers may hold one device at once
    functions: Functions = "all"


@dataclass(frozen=True, slots=True)
class AdvertisedDevice:
    """One kubelet device ID and the UACCE device behind it."""

    id: str
    device: UacceDevice
    share: int | None

    @property
    def health(self) -> Health:
        return self.device.health

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
    resource: str, devices: tuple[UacceDevice, ...], choice: EngineSettings
) -> ResourceView:
    advertised = tuple(
        AdvertisedDevice(device_id, device, None if choice.shares == 1 else share)
        for device in select_functions(devices, choice.functions)
        for share, device_id in enumerate(device_ids(device.pci_address, choice.shares))
    )
    return ResourceView(resource, advertised, {d.id: d for d in advertised})


def build_views(
    inventory: Inventory, choices: Mapping[str, EngineSettings]
) -> dict[str, ResourceView]:
    """Views for every enabled engine, including those with no devices right now."""
    views: dict[str, ResourceView] = {}
    for engine in ENGINES:
        choice = choices.get(engine.name, EngineSettings())
        if choice.enabled:
            views[engine.resource] = build_view(
                engine.resource, inventory.for_resource(engine.resource), choice
            )
    return views
