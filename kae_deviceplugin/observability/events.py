"""One log line per meaningful device event: hotplug and health transitions, with reasons, and
discovery warnings when they appear and when they clear."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.counters import Counters

log = logging.getLogger("kae_deviceplugin.devices")
MAX_LISTED = 10  # warnings named one by one per change; the rest are counted


def log_inventory_changes(old: Inventory, new: Inventory, counters: Counters | None = None) -> None:
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
    log_warning_changes(old.warnings, new.warnings, counters)


def log_warning_changes(
    old: Iterable[str], new: Iterable[str], counters: Counters | None = None
) -> None:
    """Log discovery warnings once when they appear and once when they clear, never per tick.

    However many entries are broken, one change logs at most ``MAX_LISTED`` lines of each kind
    and a count of the rest; the gauge says how many are in effect.
    """
    before, after = set(old), set(new)
    if before == after:
        return
    appeared, cleared = sorted(after - before), sorted(before - after)
    _log_listed(logging.WARNING, "discovery: %s", appeared, "new discovery warnings")
    _log_listed(logging.INFO, "discovery: no longer: %s", cleared, "discovery warnings cleared")
    if counters is not None:  # the daemon counts; a one-off `list` only logs
        counters.discovery_warnings_raised.inc(len(appeared))
        counters.discovery_warnings.set(len(after))


def _log_listed(level: int, form: str, messages: list[str], what: str) -> None:
    for message in messages[:MAX_LISTED]:
        log.log(level, form, message)
    if len(messages) > MAX_LISTED:
        log.log(level, "... and %d more %s", len(messages) - MAX_LISTED, what)
