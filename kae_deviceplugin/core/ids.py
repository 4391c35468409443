"""Kubelet device IDs for KAE devices, with optional sharing of one device by several containers.

The ID format (what ListAndWatch advertises and what Allocate receives back):

- ``shares == 1``: the ID is the device's PCI address, lowercase, exactly as sysfs spells it,
  e.g. ``0000:79:00.0``. PCI addresses are stable across reboots and driver reloads, unlike
  UACCE names (``hisi_hpre-2``), whose numbers follow probe order.
- ``shares == N > 1``: every device is advertised N times, as ``<pci address>::<k>`` with
  ``k`` in ``0 .. N-1`` written in decimal without leading zeros, e.g. ``0000:79:00.0::2``.
  ``::`` cannot occur in a PCI address, so the split is unambiguous.

The PCI address must match ``dddd:bb:ss.f`` (4 hex digits of domain, 2 of bus, 2 of slot, one
function digit 0-7, hex digits lowercase). ``N`` is at most :data:`MAX_SHARES`, so an ID is at
most 16 characters, well inside the kubelet's 63-character limit.

Allocate never parses an ID back: it looks each one up in the resource's current view, and an ID
that is not there is refused as unknown. Only :func:`pci_address_of` splits one, for IDs the
kubelet reports as held by pods (pod-resources), where no view of ours may be running. A bad
address or share count raises :class:`DeviceIdError`, a :class:`ValueError`.

The same device in DRA mode is named in the driver's pool by :func:`pool_device_name`, a DNS
label (``hisi_hpre-2`` is not one, and its number follows probe order). Both front ends need the
rule: the DRA driver to publish and prepare, the device plugin to recognise the devices DRA
claims hold on a node that moved back from DRA.
"""

from __future__ import annotations

import re

SHARE_SEPARATOR = "::"
MAX_SHARES = 64
MAX_ID_LENGTH = 63

# fullmatch, not match with "$": "$" would accept a trailing newline.
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


class DeviceIdError(ValueError):
    """A kubelet device ID that this plugin could not have advertised."""


def check_shares(shares: int) -> int:
    """Return ``shares`` if it is a valid share count, else raise ValueError."""
    # bool is an int subclass; True as a share count is certainly a mistake upstream.
    if isinstance(shares, bool) or not isinstance(shares, int):
        raise ValueError(f"share count must be an integer, got {shares!r}")
    if not 1 <= shares <= MAX_SHARES:
        raise ValueError(f"share count must be between 1 and {MAX_SHARES}, got {shares}")
    return shares


def check_pci_address(pci_address: str) -> str:
    """Return ``pci_address`` if it is a lowercase ``dddd:bb:ss.f`` address, else raise."""
    if not isinstance(pci_address, str) or not _PCI_ADDRESS.fullmatch(pci_address):
        raise DeviceIdError(
            f"invalid PCI address {pci_address!r}: expected dddd:bb:ss.f in lowercase hex, "
            "e.g. '0000:79:00.0'"
        )
    return pci_address


def device_ids(pci_address: str, shares: int) -> tuple[str, ...]:
    """The IDs advertised for the device at ``pci_address`` when it is split ``shares`` ways."""
    check_pci_address(pci_address)
    if check_shares(shares) == 1:
        return (pci_address,)
    return tuple(f"{pci_address}{SHARE_SEPARATOR}{k}" for k in range(shares))


def pci_address_of(device_id: str) -> str:
    """The PCI address inside a device ID of :func:`device_ids` (the part before ``::``)."""
    return device_id.partition(SHARE_SEPARATOR)[0]


def pool_device_name(engine: str, pci_address: str) -> str:
    """The device's name in the DRA pool: ``<engine>-<PCI address>`` with ``:`` and ``.`` as
    ``-``, e.g. ``hpre-0000-79-00-0``."""
    return f"{engine}-{pci_address.replace(':', '-').replace('.', '-')}"
