"""The cluster benchmark's DRA phase table reads what the daemon logs: a prepare's log line,
made by the daemon's own code and formatter, parses back into its parts; a pod's phases chain
from its POST to its container running (no cluster, no timing)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from kae_deviceplugin.dra.prepare_times import PrepareTimes
from tests.support.bench_modules import bench_module


def _breakdown() -> Any:
    return bench_module("dra_breakdown")


def test_a_prepare_log_line_parses_back(tmp_path: Path) -> None:
    """The line as ``observability.logs`` writes it gives the call's parts in seconds and its
    end on the benchmark's monotonic clock."""
    d = _breakdown()
    times = PrepareTimes(read=0.004, lock=0.0003, spec=0.0021, checkpoint=0.0032)
    times.fsyncs, times.fsync = 2, 0.0025
    record = logging.LogRecord(
        "kae_deviceplugin.dra.prepare", logging.INFO, "", 0, "%s", (times.line(["u1", "u2"]),), None
    )
    formatter = logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    log = tmp_path / "plugin.log"
    log.write_text("unrelated line\n" + formatter.format(record) + "\n")
    offset = time.time() - time.monotonic()
    calls = d.prepares(log, offset)
    assert set(calls) == {"u1", "u2"}
    call = calls["u1"]
    assert call.fsyncs == 2
    wanted = {"read": 4.0, "lock": 0.3, "spec": 2.1, "checkpoint": 3.2, "fsync": 2.5}
    assert {k: round(v * 1000, 1) for k, v in call.parts.items()} == wanted
    assert abs(call.end - (record.created - offset)) < 0.002  # the stamp's millisecond


def test_a_claim_pods_phases_chain_from_post_to_running() -> None:
    """Controller, scheduler, binding, kubelet, driver and runtime add up to the pod's start;
    a pod without a claim has only the binding and the rest."""
    d = _breakdown()
    prepare = d.Prepare(end=0.30, total=0.01, parts=dict.fromkeys(d.PARTS, 0.001), fsyncs=2)
    claim = d.Trace("claim", "p", 0.0, running=0.6, bound=0.2, claim_made=0.05, allocated=0.15,
                    status=0.32, prepare=prepare)  # fmt: skip
    phases = d.phases(claim)
    chain = [v for name, v in phases.items() if not name.startswith(" ")][:6]
    assert sum(v for v in chain if v is not None) == phases["POST to running"] == 0.6
    assert abs(phases[d.STATUS] - 0.02) < 1e-9
    plain = d.phases(d.Trace("none", "q", 0.0, running=0.3, bound=0.1))
    assert [k for k, v in plain.items() if v is not None] == [
        "to pod bound (scheduler's binding)",
        "to container running (kubelet, runtime)",
        "bound to running",
        "POST to running",
    ]
    assert "claim from a template" in d.table([claim, d.Trace("none", "q", 0.0, running=0.3)])
