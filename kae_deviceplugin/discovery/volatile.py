"""What changes while a device exists, and the one place both scanners judge health from it.

The attributes below are the only ones that move while a device exists; every other file of a
device is fixed when the kernel creates it. ``scan()`` reads them with the rest, the incremental
scanner re-reads them per tick (see ``watched.py``), and both build the device's volatile fields
through :func:`volatile_fields`, so the two answers cannot drift apart.

Both also give a VF its PF's ``isolate`` reading by one rule, :func:`isolate_owner`: the kernel
has one isolation flag per PF, which a VF's ``isolate`` reads (``hisi_qm_get_isolate_state``).
A VF takes the reading of its PF when that PF was read in the same pass (``scan()``: see
:func:`follow_pf_isolate`; the incremental scanner: its watched PFs, read before their VFs each
tick); a VF whose PF cannot be named or was not read (gone, skipped) reads its own file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import NamedTuple

from kae_deviceplugin.core.health import HealthFacts, judge
from kae_deviceplugin.core.model import Function, Health, UacceDevice
from kae_deviceplugin.discovery.attributes import Reading, parse_int

# Order: as VolatileReadings holds them.
VOLATILE_ATTRIBUTES = ("isolate", "dev_state", "available_instances")
ISOLATE = 0  # index of isolate in VOLATILE_ATTRIBUTES

VolatileReadings = tuple[Reading, Reading, Reading]  # as VOLATILE_ATTRIBUTES names them


def isolate_owner(device: UacceDevice) -> str | None:
    """The PCI address of the PF whose isolate flag ``device``'s ``isolate`` reads: a VF's PF;
    None for a PF, or a VF whose PF cannot be named, which read their own."""
    return device.parent_pf if device.function is Function.VF else None


class Volatile(NamedTuple):
    """The fields of a UacceDevice that follow what changes while the device exists."""

    available_instances: int | None
    isolate: int | None
    dev_state: int | None
    dev_node_exists: bool
    health: Health
    reasons: tuple[str, ...]


def volatile_fields(
    readings: VolatileReadings, *, dev_node_exists: bool, driver_bound: bool, device_link_ok: bool
) -> Volatile:
    """Parse the volatile readings and judge health: the one place both scanners do it."""
    isolate_reading, dev_state_reading, available_reading = readings
    isolate, dev_state = parse_int(isolate_reading), parse_int(dev_state_reading)
    available = parse_int(available_reading)
    health, reasons = judge(
        HealthFacts(
            isolate=isolate,
            isolate_present=isolate_reading is not None,
            dev_state=dev_state,
            dev_state_present=dev_state_reading is not None,
            dev_node_exists=dev_node_exists,
            available_instances=available if available is not None and available >= 0 else None,
            driver_bound=driver_bound,
            device_link_ok=device_link_ok,
        )
    )
    return Volatile(available, isolate, dev_state, dev_node_exists, health, reasons)


@dataclass(frozen=True, slots=True)
class DeviceRead:
    """A device as one full read saw it, plus what re-reading only its volatile signals needs."""

    device: UacceDevice
    attribute_dir: str  # where the attribute files are: the device directory or its attrs/
    readings: VolatileReadings
    driver_bound: bool
    device_link_ok: bool

    def with_isolate(self, isolate: Reading) -> DeviceRead:
        """The same read with another ``isolate`` reading (its PF's), health judged again."""
        readings: VolatileReadings = (isolate, self.readings[1], self.readings[2])
        volatile = volatile_fields(
            readings,
            dev_node_exists=self.device.dev_node_exists,
            driver_bound=self.driver_bound,
            device_link_ok=self.device_link_ok,
        )
        device = dataclasses.replace(
            self.device,
            isolate=volatile.isolate,
            health=volatile.health,
            reasons=volatile.reasons,
        )
        return dataclasses.replace(self, device=device, readings=readings)


def follow_pf_isolate(found: MutableMapping[str, DeviceRead | None]) -> None:
    """Give every VF read in this pass the ``isolate`` reading of its PF, when that PF was read
    in it too (entry name -> read, None for an entry skipped); in place."""
    owners = {
        read.device.pci_address: read.readings[ISOLATE]
        for read in found.values()
        if read is not None and isolate_owner(read.device) is None
    }
    for name, read in found.items():
        owner = None if read is None else isolate_owner(read.device)
        if read is None or owner is None or owner not in owners:
            continue
        if owners[owner] != read.readings[ISOLATE]:
            found[name] = read.with_isolate(owners[owner])
