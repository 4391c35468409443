"""Plain text tables and JSON, as kubectl prints them (pure)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns left-aligned, three spaces apart, as ``kubectl get`` lays them out."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [
        "   ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in [list(headers), *rows]
    ]
    return "\n".join(lines) + "\n"


def as_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False) + "\n"
