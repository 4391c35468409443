"""Whole-number resource quantities as the API server writes and reads them (pure).

The API server keeps a quantity in its canonical form: a decimal number is printed with the
largest SI suffix that leaves a whole mantissa (``4000`` reads back as ``4k``, ``1024`` stays
``1024``). Slices are written in that form, so what the publisher compares with what it reads
back is equal; a claim's ``consumedCapacity`` arrives in it and is read back to a number here.
Only what queue counts need: whole, non-negative numbers (binary suffixes and exponents are
accepted too, since a quantity may be written that way).
"""

from __future__ import annotations

import re
from fractions import Fraction

_DECIMAL = (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3))
_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    **{suffix: Fraction(10**power) for suffix, power in _DECIMAL},
    **{
        s: Fraction(2 ** (10 * (i + 1))) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))
    },
    "m": Fraction(1, 1000),
    "u": Fraction(1, 10**6),
    "n": Fraction(1, 10**9),
}
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]{1,3}))?"
)


def format_quantity(value: int) -> str:
    """``value`` in the API server's canonical decimal form."""
    if value < 0:
        raise ValueError(f"{value} is negative")
    for suffix, power in _DECIMAL:
        if value and value % 10**power == 0:
            return f"{value // 10**power}{suffix}"
    return str(value)


def parse_whole_quantity(text: object) -> int:
    """The whole, non-negative number a quantity such as ``8``, ``1k`` or ``2Ki`` stands for."""
    match = _QUANTITY.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{str(text)[:40]!r} is not a quantity")
    amount = Fraction(match["number"])
    if match["exponent"] is not None:
        amount *= Fraction(10) ** int(match["exponent"])
    else:
        amount *= _SUFFIXES[match["suffix"] or ""]
    if match["sign"] == "-":
        amount = -amount
    if amount < 0 or amount.denominator != 1:
        raise ValueError(f"{text!r} is not a whole number of at least 0")
    return int(amount)
