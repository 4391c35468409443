"""Device IDs for shared and unshared KAE devices: their format and what is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kae_deviceplugin.core.ids import (
    MAX_ID_LENGTH,
    MAX_SHARES,
    DeviceIdError,
    check_shares,
    device_ids,
    pci_address_of,
    pool_device_name,
)
from tests.dra.inventories import DNS_LABEL

HEX = "0123456789abcdef"
pci_addresses = st.builds(
    "{}:{}:{}.{}".format,
    st.text(HEX, min_size=4, max_size=4),
    st.text(HEX, min_size=2, max_size=2),
    st.text(HEX, min_size=2, max_size=2),
    st.sampled_from("01234567"),
)
share_counts = st.integers(min_value=1, max_value=MAX_SHARES)


def test_one_share_is_the_bare_pci_address() -> None:
    """An unshared device is advertised under its PCI address alone."""
    assert device_ids("0000:79:00.0", 1) == ("0000:79:00.0",)


def test_several_shares_get_numbered_suffixes() -> None:
    """N shares give N IDs '<address>::k', k counting from 0."""
    assert device_ids("0000:b9:00.3", 3) == (
        "0000:b9:00.3::0",
        "0000:b9:00.3::1",
        "0000:b9:00.3::2",
    )


def test_the_longest_id_fits_the_kubelet_limit() -> None:
    """Even the widest address at the largest share count stays within 63 characters."""
    ids = device_ids("ffff:ff:ff.7", MAX_SHARES)
    assert len(ids) == MAX_SHARES
    assert max(map(len, ids)) <= MAX_ID_LENGTH


@pytest.mark.parametrize("shares", [0, -1, MAX_SHARES + 1, True, 2.0, "2"])
def test_share_count_out_of_range_is_rejected(shares: object) -> None:
    """Share counts outside 1..MAX_SHARES, or not plain integers, raise ValueError."""
    with pytest.raises(ValueError, match="share count"):
        check_shares(shares)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="share count"):
        device_ids("0000:79:00.0", shares)  # type: ignore[arg-type]


@pytest.mark.parametrize("address", ["0000:79:00", "0000:79:00.0::1", "0000:79:0A.0", "", "x"])
def test_device_ids_rejects_a_bad_address(address: str) -> None:
    """IDs are never built from something that is not a PCI address."""
    with pytest.raises(DeviceIdError, match="invalid PCI address"):
        device_ids(address, 2)


def test_device_id_error_is_a_value_error() -> None:
    """Callers that catch ValueError also catch malformed IDs."""
    assert issubclass(DeviceIdError, ValueError)


@given(pci_addresses, share_counts)
def test_every_generated_id_is_distinct_and_within_the_kubelet_limit(
    pci_address: str, shares: int
) -> None:
    """Any device split any number of ways gets distinct IDs the kubelet accepts."""
    ids = device_ids(pci_address, shares)
    assert len(set(ids)) == shares
    assert all(len(i) <= MAX_ID_LENGTH and i.startswith(pci_address) for i in ids)


@given(pci_addresses, share_counts)
def test_every_id_leads_back_to_its_pci_address(pci: str, shares: int) -> None:
    """What pod-resources reports held (an ID, maybe a share) names the device's address."""
    assert {pci_address_of(device_id) for device_id in device_ids(pci, shares)} == {pci}


@given(st.sampled_from(["hpre", "sec", "zip"]), pci_addresses)
def test_pool_device_names_are_dns_labels_unique_per_address(engine: str, pci: str) -> None:
    """The DRA pool's name of a device is a DNS label that keeps every hex digit of the address
    in order, so two addresses never share a name."""
    name = pool_device_name(engine, pci)
    assert DNS_LABEL.fullmatch(name) and len(name) <= 63
    assert name.removeprefix(f"{engine}-").split("-") == pci.replace(".", ":").split(":")
