"""Health policy: turns what discovery read into Healthy/Unhealthy and stable reason codes.

Kept apart from parsing so the rules read as a table. Reason codes are short, fixed strings so that
logs, the CLI and metric labels (bounded cardinality) all speak the same words.
"""

from __future__ import annotations

from dataclasses import dataclass

from kae_deviceplugin.core.model import Health

ISOLATED = "isolated"
ISOLATE_UNREADABLE = "isolate-unreadable"
ENGINE_STOPPED = "engine-stopped"
DEV_STATE_UNREADABLE = "dev-state-unreadable"
DEV_NODE_MISSING = "dev-node-missing"
QUEUES_UNREADABLE = "available-instances-unreadable"
DRIVER_UNBOUND = "driver-unbound"
DEVICE_LINK_BROKEN = "device-link-broken"

ALL_REASONS: tuple[str, ...] = (
    ISOLATED,
    ISOLATE_UNREADABLE,
    ENGINE_STOPPED,
    DEV_STATE_UNREADABLE,
    DEV_NODE_MISSING,
    QUEUES_UNREADABLE,
    DRIVER_UNBOUND,
    DEVICE_LINK_BROKEN,
)

# What an operator can do about each reason (shown by `kae-deviceplugin doctor`).
REASON_FIXES: dict[str, str] = {
    ISOLATED: "repeated hardware errors isolated the engine: read `dmesg | grep -i hisi`, then "
    "reload its driver (modprobe -r, modprobe) or reset the PCI function to clear it",
    ISOLATE_UNREADABLE: "the kernel's `isolate` file cannot be read: check dmesg and the driver "
    "version; reload the driver",
    ENGINE_STOPPED: "dev_state is -1 (the engine stopped after a failed reset or a hardware "
    "error): read dmesg, then reload the driver or reset the PCI function",
    DEV_STATE_UNREADABLE: "the kernel's `dev_state` file cannot be read: check dmesg and the "
    "driver version; reload the driver",
    DEV_NODE_MISSING: "no /dev/<name>: check that udev created it (`ls -l /dev/hisi_*`) and that "
    "--dev-root points at the host's /dev (the chart mounts it at /host/dev)",
    QUEUES_UNREADABLE: "available_instances cannot be read (driver mid-reset or broken): read "
    "dmesg; reload the driver",
    DRIVER_UNBOUND: "bind the PCI function to its driver: "
    "`echo <pci address> > /sys/bus/pci/drivers/<driver>/bind`, or modprobe the driver",
    DEVICE_LINK_BROKEN: "the uacce device's `device` link does not lead to its PCI function "
    "(a kernel or driver fault): reload the driver, and report it with the kernel version",
}

# Not a fault of the device, so not among ALL_REASONS (what sysfs can say): the device plugin
# reports a device Unhealthy for this while a DRA claim of a running pod holds it, on a node that
# moved back from DRA mode (issue 27), so the kubelet does not hand it out twice.
HELD_BY_DRA_CLAIM = "held-by-dra-claim"

_DEV_STATE_STOPPED = -1


@dataclass(frozen=True, slots=True)
class HealthFacts:
    """The signals that can be read without opening the device node (which would take a queue).

    For ``isolate`` and ``dev_state``: ``None`` with ``*_present`` False means the kernel is too
    old to have the file, which is not a fault; present but unparseable is a fault, because a
    value we cannot read is a value we cannot vouch for.
    """

    isolate: int | None
    isolate_present: bool
    dev_state: int | None
    dev_state_present: bool
    dev_node_exists: bool
    available_instances: int | None
    driver_bound: bool
    device_link_ok: bool


def judge(facts: HealthFacts) -> tuple[Health, tuple[str, ...]]:
    """Return the device's health and every reason it is not Healthy, in a fixed order."""
    reasons: list[str] = []
    if facts.isolate_present and facts.isolate is None:
        reasons.append(ISOLATE_UNREADABLE)
    elif facts.isolate is not None and facts.isolate != 0:
        reasons.append(ISOLATED)
    if facts.dev_state_present and facts.dev_state is None:
        reasons.append(DEV_STATE_UNREADABLE)
    elif facts.dev_state == _DEV_STATE_STOPPED:
        reasons.append(ENGINE_STOPPED)
    if not facts.dev_node_exists:
        reasons.append(DEV_NODE_MISSING)
    if facts.available_instances is None:
        reasons.append(QUEUES_UNREADABLE)
    if not facts.driver_bound:
        reasons.append(DRIVER_UNBOUND)
    if not facts.device_link_ok:
        reasons.append(DEVICE_LINK_BROKEN)
    return (Health.UNHEALTHY if reasons else Health.HEALTHY), tuple(reasons)
