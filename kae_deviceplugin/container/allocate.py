"""Allocate's first step: the distinct, healthy devices a request's IDs name, or why not.

What the container then gets for those devices is :mod:`kae_deviceplugin.container.edits`.
"""

from __future__ import annotations

from collections.abc import Sequence

from kae_deviceplugin.container.edits import ContainerOptions
from kae_deviceplugin.core.model import UacceDevice
from kae_deviceplugin.core.views import ResourceView
from kae_deviceplugin.errors import AllocationError

MAX_IDS_PER_REQUEST = 1024


def require_view(resource: str, options: ContainerOptions) -> None:
    """Refuse to hand out a view of /sys/class/uacce (or CDI spec) that could not be written."""
    if options.view_problem is not None and (
        options.sysfs_view or options.cdi or options.openssl_conf
    ):
        raise AllocationError("FAILED_PRECONDITION", f"{resource}: {options.view_problem}")


def resolve_request(view: ResourceView, ids: Sequence[str]) -> tuple[UacceDevice, ...]:
    """The distinct devices behind ``ids``, or an AllocationError naming the offending ID."""
    if not ids:
        raise AllocationError("INVALID_ARGUMENT", f"{view.resource}: empty device request")
    if len(ids) > MAX_IDS_PER_REQUEST:
        raise AllocationError(
            "INVALID_ARGUMENT",
            f"{view.resource}: {len(ids)} device IDs requested, at most {MAX_IDS_PER_REQUEST}",
        )
    if len(set(ids)) != len(ids):
        duplicate = next(i for n, i in enumerate(ids) if i in ids[:n])
        raise AllocationError("INVALID_ARGUMENT", f"{view.resource}: duplicate ID {duplicate!r}")
    devices: dict[str, UacceDevice] = {}
    for device_id in ids:
        advertised = view.by_id.get(device_id)
        if advertised is None:
            raise AllocationError(
                "INVALID_ARGUMENT", f"{view.resource}: unknown device ID {device_id[:80]!r}"
            )
        if not advertised.device.healthy:
            reasons = ", ".join(advertised.device.reasons)
            raise AllocationError(
                "FAILED_PRECONDITION",
                f"{view.resource}: device {device_id} is Unhealthy ({reasons})",
            )
        devices.setdefault(advertised.device.pci_address, advertised.device)
    return tuple(devices.values())
