#!/usr/bin/env python3
"""Rewrite the chart's generated value rules from the daemon's settings table.

Writes the daemon-setting nodes of deploy/helm/kae-device-plugin/values.schema.json (their types;
the rest of that file is written by hand) and templates/_value_rules.tpl (their spelling and
range, checked with the daemon's own messages).

Usage: python scripts/render-chart-schema.py [--check]
tests/deploy/test_value_rules.py fails when the committed files are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # render from this checkout's rules, not an installed copy's

from scripts.chart_tooling.chart_checks import render_value_template  # noqa: E402
from scripts.chart_tooling.chart_rules import render_schema  # noqa: E402 -- the path above

CHART = ROOT / "deploy" / "helm" / "kae-device-plugin"
SCHEMA = CHART / "values.schema.json"
TEMPLATE = CHART / "templates" / "_value_rules.tpl"


def main() -> int:
    wanted = {
        SCHEMA: render_schema(SCHEMA.read_text(encoding="utf-8")),
        TEMPLATE: render_value_template(),
    }
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text("utf-8") != text]
    if "--check" in sys.argv[1:]:
        for path in stale:
            print(f"{path} is stale: run scripts/render-chart-schema.py", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path], encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
