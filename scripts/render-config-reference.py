#!/usr/bin/env python3
"""Rewrite the settings reference table in docs/configuration.md from the settings table.

Usage: python scripts/render-config-reference.py [--check]
tests/config/test_schema.py fails when the committed table is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # render from this checkout's table, not an installed copy's

from kae_deviceplugin.config.reference import render_reference  # noqa: E402

DOC = ROOT / "docs" / "configuration.md"
BEGIN, END = "<!-- BEGIN settings reference -->\n", "<!-- END settings reference -->"


def rendered(text: str) -> str:
    """``text`` with the block between the markers replaced by the current reference."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + BEGIN + render_reference() + END + tail


def main() -> int:
    text = DOC.read_text(encoding="utf-8")
    new = rendered(text)
    if "--check" in sys.argv[1:]:
        if new != text:
            print(f"{DOC} is stale: run scripts/render-config-reference.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
