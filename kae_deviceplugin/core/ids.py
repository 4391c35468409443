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
most 16 characters, well inside the kubelet's 63-character limit, which is checked anyway so
that garbage of any length gets one clear error.

Every malformed ID raises :class:`DeviceIdError`, a :class:`ValueError`, and nothing else.
"""

from __future__ import annotations

import re
from typing import NamedTuple

SHARE_SEPARATOR = "::"
MAX_SHARES = 64
MAX_ID_LENGTH = 63

# fullmatch, not match with "$": "$" would accept a trailing newline.
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
# No leading zeros: exactly one spelling per share, so IDs compare equal iff shares do.
_SHARE_INDEX = re.compile(r"0|[1-9][0-9]?")


class DeviceIdError(ValueError):
    """A kubelet device ID that this plugin could not have advertised."""


class ParsedId(NamedTuple):
    """A device ID split into the device's PCI address and the share index (None: unshared)."""

    pci_address: str
    share: int | None


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


def parse_device_id(device_id: str) -> ParsedId:
    """Split an ID made by :func:`device_ids`; raise DeviceIdError for anything else."""
    if not isinstance(device_id, str):
        raise DeviceIdError(f"device ID must be a string, got {type(device_id).__name__}")
    if not device_id:
        raise DeviceIdError("empty device ID")
    if len(device_id) > MAX_ID_LENGTH:
        raise DeviceIdError(
            f"device ID {device_id[:MAX_ID_LENGTH]!r}... is {len(device_id)} characters long, "
            f"more than the kubelet's limit of {MAX_ID_LENGTH}"
        )
    if not (device_id.isascii() and device_id.isprintable()) or any(c.isspace() for c in device_id):
        raise DeviceIdError(
            f"device ID {device_id!r} contains non-printable or non-ASCII characters"
        )
    pci_address, separator, share_text = device_id.partition(SHARE_SEPARATOR)
    try:
        check_pci_address(pci_address)
    except DeviceIdError as error:
        raise DeviceIdError(f"device ID {device_id!r}: {error}") from None
    if not separator:
        return ParsedId(pci_address, None)
    if not _SHARE_INDEX.fullmatch(share_text) or int(share_text) >= MAX_SHARES:
        raise DeviceIdError(
            f"device ID {device_id!r}: invalid share index {share_text!r}, expected a decimal "
            f"number from 0 to {MAX_SHARES - 1} without leading zeros"
        )
    return ParsedId(pci_address, int(share_text))
