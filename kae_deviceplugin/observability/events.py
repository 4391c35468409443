"""One log line per meaningful device event: hotplug and health transitions, with reasons."""

from __future__ import annotations

import logging

from kae_deviceplugin.core.model import Inventory

log = logging.getLogger("kae_deviceplugin.devices")


def log_inventory_changes(old: Inventory, new: Inventory) -> None:
    before = old.by_pci_address()
    after = new.by_pci_address()
    for pci, device in after.items():
        previous = before.get(pci)
        if previous is None:
            health = device.health.value
            if not device.healthy:
                health += ": " + ", ".join(device.reasons)
            numa = "unknown" if device.numa_node is None else device.numa_node
            log.log(
                logging.INFO if device.healthy else logging.WARNING,
                "device added: %s %s at %s (%s; NUMA %s)",
                device.engine,
                device.name,
                pci,
                health,
                numa,
            )
        elif previous.health is not device.health:
            if device.healthy:
                log.info("device %s at %s is Healthy again", device.name, pci)
            else:
                log.warning(
                    "device %s at %s is Unhealthy: %s", device.name, pci, ", ".join(device.reasons)
                )
        elif previous.reasons != device.reasons and not device.healthy:
            log.warning(
                "device %s at %s still Unhealthy, now: %s",
                device.name,
                pci,
                ", ".join(device.reasons),
            )
    for pci, device in before.items():
        if pci not in after:
            log.info("device removed: %s %s at %s", device.engine, device.name, pci)
    for warning in set(new.warnings) - set(old.warnings):
        log.debug("discovery: %s", warning)
