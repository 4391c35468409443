"""Where one NodePrepareResources call's time went, as the driver sees it: one log line each.

The pod-start benchmark (benchmarks/bench_dra.py) reads these lines from the daemon's log to
break a claim's pod start down; an operator reads them to see a slow disk or API server. The
claims' reads run concurrently, so ``read`` is the call's wait for all of them. ``fsyncs`` are
those of the whole process during the locked part (``safe_fs.FSYNCS``): everything there runs
on the event loop's thread, without a wait, so they are this call's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from kae_deviceplugin.container import safe_fs

PREFIX = "NodePrepareResources"


@dataclass
class PrepareTimes:
    """Seconds spent in each part of one prepare call, from its start."""

    started: float = field(default_factory=time.perf_counter)
    read: float = 0.0  # the claims' GETs from the API server
    lock: float = 0.0  # both locks taken and the checkpoint read again under them
    spec: float = 0.0  # CDI specs written (their fsyncs included)
    checkpoint: float = 0.0  # the checkpoint saved (its fsyncs included)
    fsyncs: int = 0
    fsync: float = 0.0
    _fsyncs_at: tuple[int, float] = (0, 0.0)

    def mark(self) -> float:
        return time.perf_counter()

    def fsyncs_start(self) -> None:
        self._fsyncs_at = (safe_fs.FSYNCS.calls, safe_fs.FSYNCS.seconds)

    def fsyncs_end(self) -> None:
        calls, seconds = self._fsyncs_at
        self.fsyncs = safe_fs.FSYNCS.calls - calls
        self.fsync = safe_fs.FSYNCS.seconds - seconds

    def line(self, uids: Iterable[str]) -> str:
        """``NodePrepareResources <uids>: <total> ms (claim read ..., ...)``."""
        total = time.perf_counter() - self.started
        return (
            f"{PREFIX} {','.join(uids)}: {_ms(total)} ms (claim read {_ms(self.read)}, "
            f"lock {_ms(self.lock)}, CDI spec {_ms(self.spec)}, checkpoint "
            f"{_ms(self.checkpoint)}; {self.fsyncs} fsyncs {_ms(self.fsync)} ms)"
        )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"
