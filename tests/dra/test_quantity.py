"""Quantities as the API server prints and reads them: canonical on the way out, any valid
spelling of a whole number on the way in."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kae_deviceplugin.dra.quantity import format_quantity, parse_whole_quantity


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (1, "1"), (64, "64"), (1024, "1024"), (1500, "1500"), (4000, "4k"), (10**6, "1M")],
)
def test_whole_numbers_are_written_as_the_server_prints_them(value: int, text: str) -> None:
    """4000 is 4k (the server's canonical form), 1024 and 1500 stay as they are."""
    assert format_quantity(value) == text


@pytest.mark.parametrize(
    ("text", "value"),
    [("8", 8), (" 8 ", 8), ("1k", 1000), ("2Ki", 2048), ("1e3", 1000), ("8000m", 8), ("+3", 3)],
)
def test_every_spelling_of_a_whole_number_is_read(text: str, value: int) -> None:
    """Suffixes, exponents and milli-units that make a whole number are read as that number."""
    assert parse_whole_quantity(text) == value


@pytest.mark.parametrize("text", ["", "-1", "1.5", "500m", "eight", "1x", None, 8])
def test_anything_else_is_refused(text: object) -> None:
    """Fractions, negatives, other words and non-strings are not a queue count."""
    with pytest.raises(ValueError):
        parse_whole_quantity(text)


@given(st.integers(0, 10**15))
def test_what_is_written_reads_back(value: int) -> None:
    """format then parse is the identity."""
    assert parse_whole_quantity(format_quantity(value)) == value
