"""Device IDs for shared and unshared KAE devices: format, parsing, and rejection of garbage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kae_deviceplugin.core.ids import (
    MAX_ID_LENGTH,
    MAX_SHARES,
    DeviceIdError,
    ParsedId,
    check_shares,
    device_ids,
    parse_device_id,
)

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


@pytest.mark.parametrize(
    ("device_id", "expected"),
    [
        ("0000:79:00.0", ParsedId("0000:79:00.0", None)),
        ("0000:b5:00.7::0", ParsedId("0000:b5:00.7", 0)),
        ("0000:b5:00.7::9", ParsedId("0000:b5:00.7", 9)),
        ("abcd:ef:1f.1::63", ParsedId("abcd:ef:1f.1", 63)),
    ],
)
def test_valid_ids_parse(device_id: str, expected: ParsedId) -> None:
    """Well-formed IDs split into address and share index (None when unshared)."""
    assert parse_device_id(device_id) == expected


@pytest.mark.parametrize(
    ("device_id", "message"),
    [
        ("", "empty"),
        ("0000:79:00.0::1" + "0" * 60, "more than the kubelet's limit"),
        ("0000:79:00.0\n", "non-printable"),
        (" 0000:79:00.0", "non-printable"),
        ("0000:79:00.0\x00", "non-printable"),
        ("0000:79:00.0::\u0661", "non-printable or non-ASCII"),
        ("0000:79:00.\u00e9", "non-ASCII"),
        ("0000:79:00.8", "invalid PCI address"),
        ("0000:79:00.A", "invalid PCI address"),
        ("0000:7A:00.0", "invalid PCI address"),
        ("000:79:00.0", "invalid PCI address"),
        ("79:00.0", "invalid PCI address"),
        ("hisi_hpre-2", "invalid PCI address"),
        ("::1", "invalid PCI address"),
        ("0000:79:00.0:1", "invalid PCI address"),
        ("0000:79:00.0::", "invalid share index"),
        ("0000:79:00.0::01", "invalid share index"),
        ("0000:79:00.0::64", "invalid share index"),
        ("0000:79:00.0::-1", "invalid share index"),
        ("0000:79:00.0::+1", "invalid share index"),
        ("0000:79:00.0::1::2", "invalid share index"),
        ("0000:79:00.0::x", "invalid share index"),
    ],
)
def test_malformed_ids_raise_a_clear_error(device_id: str, message: str) -> None:
    """Each kind of malformed ID raises DeviceIdError naming what is wrong."""
    with pytest.raises(DeviceIdError, match=message):
        parse_device_id(device_id)


def test_device_id_error_is_a_value_error() -> None:
    """Callers that catch ValueError also catch malformed IDs."""
    assert issubclass(DeviceIdError, ValueError)


@pytest.mark.parametrize("value", [None, 7, b"0000:79:00.0"])
def test_non_strings_raise_device_id_error(value: object) -> None:
    """Non-string input is rejected with the same error type, not a TypeError."""
    with pytest.raises(DeviceIdError, match="must be a string"):
        parse_device_id(value)  # type: ignore[arg-type]


@given(pci_addresses, share_counts)
def test_every_generated_id_parses_back(pci_address: str, shares: int) -> None:
    """device_ids and parse_device_id are inverse: each ID gives back its address and index."""
    ids = device_ids(pci_address, shares)
    assert len(set(ids)) == shares
    parsed = [parse_device_id(device_id) for device_id in ids]
    assert {p.pci_address for p in parsed} == {pci_address}
    expected = [None] if shares == 1 else list(range(shares))
    assert [p.share for p in parsed] == expected
    assert all(len(device_id) <= MAX_ID_LENGTH for device_id in ids)


@given(st.one_of(st.text(), st.text(alphabet=HEX + ":.-x \n", max_size=24)))
def test_garbage_only_ever_raises_device_id_error(text: str) -> None:
    """Arbitrary text either parses or raises DeviceIdError, never any other exception."""
    try:
        parsed = parse_device_id(text)
    except DeviceIdError:
        return
    # Whatever parses is in canonical form: generating it again gives the same string.
    shares = 1 if parsed.share is None else MAX_SHARES
    index = 0 if parsed.share is None else parsed.share
    assert device_ids(parsed.pci_address, shares)[index] == text


@given(pci_addresses, st.integers(min_value=0, max_value=MAX_SHARES - 1))
def test_suffix_mutations_are_rejected_or_canonical(pci_address: str, share: int) -> None:
    """Zero-padded share indexes never parse, so each share has exactly one spelling."""
    with pytest.raises(DeviceIdError):
        parse_device_id(f"{pci_address}::0{share}")
