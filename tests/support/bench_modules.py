"""Benchmark modules for the tests of their seams, imported as the benchmarks import each
other: from benchmarks/ as the first entry of the path."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def bench_module(name: str) -> Any:
    """benchmarks/<name>.py as a module."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
