"""Figures, their statistics, the machine they were measured on, and the printed table."""

from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Figure:
    """One row of the table. Values are in ``unit``; a missing median means "not measured"."""

    key: str  # stable across modes: what the smoke test and JSON consumers look for
    label: str
    unit: str
    median: float | None
    p99: float | None = None
    ratio: float | None = None
    reference: str = ""  # what the ratio divides by, with its value, measured in the same run
    target: str = ""
    met: bool | None = None
    note: str = ""  # why a figure is missing, or what qualifies it
    samples: list[float] = field(default_factory=list)


def median(samples: Sequence[float]) -> float:
    return float(statistics.median(samples))


def p99(samples: Sequence[float]) -> float:
    """Nearest-rank 99th percentile: an observed value, never an interpolation."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs: the cost of one more x."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def cpu_model() -> str:
    """The CPU's marketing name; ARM kernels only give implementer and part numbers."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip(), value.strip())
    if "model name" in fields:
        return fields["model name"]
    if "CPU part" in fields:
        return f"implementer {fields.get('CPU implementer', '?')} part {fields['CPU part']}"
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        # A shared machine: the load others put on it when the run started.
        "load_at_start": os.getloadavg()[0],
        "argv": sys.argv[1:],
    }


def machine_line(info: dict[str, Any]) -> str:
    return (
        f"Machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), "
        f"{info['arch']}, Linux {info['kernel']}, {info['implementation']} {info['python']}, "
        f"{info['date']}, load average {info['load_at_start']:.2f} at start"
    )


def _number(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _value(value: float | None, unit: str) -> str:
    return "" if value is None else f"{_number(value)} {unit}"


def _short(text: str, width: int = 90) -> str:
    """First line, cut to ``width``: the table stays readable, the JSON keeps the whole text."""
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 3] + "..."


def _met(figure: Figure) -> str:
    if not figure.target:
        return ""
    return {True: "yes", False: "NO", None: "?"}[figure.met]


HEADERS = ("figure", "median", "p99", "ratio", "reference (same run)", "target", "met?")


def rows(figures: Sequence[Figure]) -> list[tuple[str, ...]]:
    table: list[tuple[str, ...]] = []
    for f in figures:
        measured = f.median is not None or f.p99 is not None
        shown = _value(f.median, f.unit) if measured else _short(f.note or "n/a")
        reference = f.reference if measured else ""
        if measured and f.note:
            reference = _short(f"{reference}; {f.note}" if reference else f.note, 120)
        ratio = "" if f.ratio is None else f"{_number(f.ratio)}x"
        table.append((f.label, shown, _value(f.p99, f.unit), ratio, reference, f.target, _met(f)))
    return table


def render(figures: Sequence[Figure], info: dict[str, Any], fmt: str = "text") -> str:
    """The table, plain text for a terminal or Markdown for the README."""
    body = rows(figures)
    if fmt == "markdown":
        lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in body]
        return machine_line(info) + "\n\n" + "\n".join(lines)
    widths = [max(len(row[i]) for row in [HEADERS, *body]) for i in range(len(HEADERS))]
    sep = "  "
    lines = [sep.join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True)).rstrip()]
    lines.append(sep.join("-" * w for w in widths))
    lines += [
        sep.join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body
    ]
    return machine_line(info) + "\n" + "\n".join(lines)


def as_json(figures: Sequence[Figure], info: dict[str, Any]) -> dict[str, Any]:
    return {"machine": info, "figures": [asdict(f) for f in figures]}


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def section(name: str, measure: Callable[[], list[Figure]], figures: list[Figure]) -> bool:
    """Run one section; a failure becomes a row, not a crash. True when it worked."""
    progress(f"measuring {name} ...")
    started = time.monotonic()
    try:
        figures += measure()
        return True
    except Exception as err:
        traceback.print_exc(file=sys.stderr)
        figures.append(
            Figure(
                key=f"{name}_error",
                label=f"{name}: FAILED",
                unit="",
                median=None,
                note=f"error: {err}",
            )
        )
        return False
    finally:
        progress(f"  {name} took {time.monotonic() - started:.1f} s")
