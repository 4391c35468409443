"""What the incremental scanner keeps about one device between full reads."""

from __future__ import annotations

import dataclasses

from kae_deviceplugin.discovery.attributes import Reading, read_attribute
from kae_deviceplugin.discovery.scan import VOLATILE_ATTRIBUTES, DeviceRead, volatile_fields


class WatchedDevice:
    """One device between full reads: its kept files and the signals its object was built from."""

    __slots__ = (
        "absent",
        "by_path",
        "dev_node",
        "dev_node_exists",
        "device",
        "device_link_ok",
        "dirty",
        "driver",
        "driver_bound",
        "kept",
        "paths",
        "raws",
        "readings",
    )

    def __init__(self, found: DeviceRead, dev_root: str) -> None:
        self.device = found.device
        self.device_link_ok = found.device_link_ok
        self.paths = [f"{found.attribute_dir}/{name}" for name in VOLATILE_ATTRIBUTES]
        self.kept: list[tuple[int, int]] = []  # (index in VOLATILE_ATTRIBUTES, open fd)
        self.by_path: list[int] = []  # indexes read by path each tick; absent ones are in neither
        self.absent: list[str] = []  # volatile files the device lacked when it was read
        self.raws: list[bytes | None] = [None] * len(VOLATILE_ATTRIBUTES)  # None: not compared
        self.readings: list[Reading] = list(found.readings)
        self.dev_node = f"{dev_root}/{found.device.name}"
        self.dev_node_exists = found.device.dev_node_exists
        self.driver = f"{found.device.pci_path}/driver"
        self.driver_bound = found.driver_bound
        self.dirty = False  # the device object lags behind ``readings``

    def reread_by_path(self) -> bool | None:
        """Re-read the files kept no fd for; whether one changed, None if one vanished."""
        changed = False
        for index in self.by_path:
            reading = read_attribute(self.paths[index])
            if reading is None:
                return None  # it was there when the device was read
            if reading != self.readings[index]:
                self.readings[index] = reading
                changed = True
        return changed

    def rebuild(self) -> None:
        """A new device object for the current signals; static fields carried over."""
        readings = self.readings
        volatile = volatile_fields(
            (readings[0], readings[1], readings[2]),
            dev_node_exists=self.dev_node_exists,
            driver_bound=self.driver_bound,
            device_link_ok=self.device_link_ok,
        )
        self.device = dataclasses.replace(
            self.device,
            available_instances=volatile.available_instances,
            isolate=volatile.isolate,
            dev_state=volatile.dev_state,
            dev_node_exists=volatile.dev_node_exists,
            health=volatile.health,
            reasons=volatile.reasons,
        )
        self.dirty = False
