"""The DRA pod start taken apart (issue 31): where a claim's pod spends the time a pod without a
device does not, phase by phase, from the same run's watches and the DRA daemon's log.

Every pod is traced from its POST to its container running. The pod watch gives when it was
bound (``spec.nodeName`` first set: the scheduler's binding) and running; a watch of the
namespace's ResourceClaims gives when its claim appeared (made by the resource-claim controller
from the template, or made before the pod) and when ``status.allocation`` first showed (the
scheduler's allocation, written before the binding); the daemon's log gives each
NodePrepareResources call as the driver saw it, with its parts (``dra/prepare_times.py``). Every
event is stamped on arrival (``time.monotonic()``); a log line's wall-clock stamp (ms) is moved
onto the same clock.

The table has one column per kind of pod and the median of each phase in ms over its pods;
a phase a kind does not have is blank. Phases chain, so for one pod they add up to its start.
"""

from __future__ import annotations

import datetime
import queue
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_core import median
from kube_watch import Watch

KINDS = {
    "claim": "claim from a template",
    "premade": "pre-made claim",
    "device": "device-plugin HPRE",
    "none": "no device",
}
LOG_LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+\s+\S+: NodePrepareResources "
    r"(?P<uids>\S+): (?P<total>[\d.]+) ms \(claim read (?P<read>[\d.]+), lock (?P<lock>[\d.]+), "
    r"CDI spec (?P<spec>[\d.]+), checkpoint (?P<checkpoint>[\d.]+); (?P<fsyncs>\d+) fsyncs "
    r"(?P<fsync>[\d.]+) ms\)"
)
PARTS = ("read", "lock", "spec", "checkpoint", "fsync")
PART_NAMES = {
    "read": "  claim read (GET)",
    "lock": "  locks and checkpoint read",
    "spec": "  CDI spec written",
    "checkpoint": "  checkpoint written",
    "fsync": "  of which fsync",
}
COUNT = "  fsyncs (a count)"
STATUS = "answer to the claim's status in the API (off the path)"


@dataclass(frozen=True)
class Prepare:
    """One NodePrepareResources call from the daemon's log: its end (monotonic) and its parts
    in seconds."""

    end: float
    total: float
    parts: Mapping[str, float]
    fsyncs: int


@dataclass
class Trace:
    """One pod's milestones, monotonic seconds; None where the pod has no such step."""

    kind: str
    pod: str
    posted: float
    running: float = 0.0
    bound: float | None = None
    claim_uid: str | None = None
    claim_made: float | None = None
    allocated: float | None = None
    status: float | None = None  # the driver's status.devices first seen in the claim
    prepare: Prepare | None = None


@dataclass
class ClaimEvents:
    """What the claims watch showed, by claim UID: first seen, first allocated, its pod."""

    made: dict[str, float] = field(default_factory=dict)
    allocated: dict[str, float] = field(default_factory=dict)
    status: dict[str, float] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)  # the template's pod, by claim UID
    gone: set[str] = field(default_factory=set)

    def take(self, watch: Watch) -> None:
        """Every event that has arrived, without waiting."""
        while True:
            try:
                at, kind, claim = watch.events.get_nowait()
            except queue.Empty:
                return
            meta = claim.get("metadata", {})
            uid = meta.get("uid", "")
            self.made.setdefault(uid, at)
            self.names[uid] = meta.get("name", "")
            for owner in meta.get("ownerReferences") or []:
                if owner.get("kind") == "Pod":
                    self.owners[uid] = owner.get("name", "")
            if claim.get("status", {}).get("allocation"):
                self.allocated.setdefault(uid, at)
            if claim.get("status", {}).get("devices"):
                self.status.setdefault(uid, at)
            if kind == "DELETED":
                self.gone.add(uid)

    def of(self, trace: Trace, claim_name: str | None) -> None:
        """Fill ``trace``'s claim milestones: the claim named, else the one its pod owns."""
        for uid, name in self.names.items():
            if name == claim_name or (claim_name is None and self.owners.get(uid) == trace.pod):
                trace.claim_uid = uid
                trace.claim_made = self.made.get(uid)
                trace.allocated = self.allocated.get(uid)
                trace.status = self.status.get(uid)

    def wait_gone(self, watch: Watch, uid: str, timeout: float) -> None:
        """Until the claim ``uid`` is deleted (its finalizer removed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.take(watch)
            if uid in self.gone:
                return
            time.sleep(0.02)
        raise TimeoutError(f"claim {self.names.get(uid, uid)} still there after {timeout} s")


def bound_at(trace: Trace, at: float, pod: Mapping[str, Any]) -> None:
    """Note the first event that shows the pod bound to a node."""
    if trace.bound is None and pod.get("spec", {}).get("nodeName"):
        trace.bound = at


def prepares(log: Path, clock_offset: float) -> dict[str, Prepare]:
    """Every NodePrepareResources line of the daemon's log, by claim UID; ``clock_offset`` is
    wall-clock minus monotonic time, taken in this process."""
    found: dict[str, Prepare] = {}
    text = log.read_text(errors="replace") if log.exists() else ""
    for line in text.splitlines():
        match = LOG_LINE.match(line)
        if match is None:
            continue
        stamp = datetime.datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        call = Prepare(
            end=stamp - clock_offset,
            total=float(match["total"]) / 1000,
            parts={p: float(match[p]) / 1000 for p in PARTS},
            fsyncs=int(match["fsyncs"]),
        )
        for uid in match["uids"].split(","):
            found[uid] = call
    return found


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start


def phases(t: Trace) -> dict[str, float | None]:
    """One pod's phases in seconds, in order; None where it has no such phase."""
    p = t.prepare
    began = None if p is None else p.end - p.total
    after_claim = t.allocated if t.allocated is not None else t.posted
    parts = {PART_NAMES[k]: (None if p is None else p.parts[k]) for k in PARTS}
    return {
        "POST to claim made (resource-claim controller)": (
            _span(t.posted, t.claim_made) if t.kind == "claim" else None
        ),
        "to claim allocated (scheduler)": _span(
            t.posted if t.kind == "premade" else t.claim_made, t.allocated
        ),
        "to pod bound (scheduler's binding)": _span(after_claim, t.bound),
        "bound to NodePrepareResources called (kubelet)": _span(t.bound, began),
        "NodePrepareResources (driver)": None if p is None else p.total,
        **parts,
        COUNT: None if p is None else float(p.fsyncs),
        "to container running (kubelet, runtime)": _span(
            t.bound if p is None else p.end, t.running
        ),
        "bound to running": _span(t.bound, t.running),
        "POST to running": t.running - t.posted,
        STATUS: _span(None if p is None else p.end, t.status),
    }


def table(traces: Sequence[Trace], fmt: str = "text") -> str:
    """The phases' medians in ms, a column per kind of pod (counts are counts)."""
    kinds = [k for k in KINDS if any(t.kind == k for t in traces)]
    rows: list[list[str]] = []
    names = list(phases(traces[0])) if traces else []
    for name in names:
        row = [name]
        for kind in kinds:
            values = [v for t in traces if t.kind == kind if (v := phases(t)[name]) is not None]
            scale = 1 if name == COUNT else 1000
            row.append(f"{median(values) * scale:.1f}" if values else "")
        rows.append(row)
    headers = ["phase (median, ms)", *(KINDS[k] for k in kinds)]
    if fmt == "markdown":
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [headers, ["-" * w for w in widths], *rows]
    )
