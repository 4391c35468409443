"""What changes while a device exists, and the one place both scanners judge health from it.

The attributes below are the only ones that move while a device exists; every other file of a
device is fixed when the kernel creates it. ``scan()`` reads them with the rest, the incremental
scanner re-reads them per tick (see ``watched.py``), and both build the device's volatile fields
through :func:`volatile_fields`, so the two answers cannot drift apart.
"""

from __future__ import annotations

from typing import NamedTuple

from kae_deviceplugin.core.health import HealthFacts, judge
from kae_deviceplugin.core.model import Health
from kae_deviceplugin.discovery.attributes import Reading, parse_int

# Order: as VolatileReadings holds them.
VOLATILE_ATTRIBUTES = ("isolate", "dev_state", "available_instances")

VolatileReadings = tuple[Reading, Reading, Reading]  # as VOLATILE_ATTRIBUTES names them


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
