"""Retry pacing for calls to a server that may refuse, slow down or vanish (pure: the caller
passes the clock's time in).

Two rules, both needed. ``Backoff`` spaces the retries of one item (one ResourceSlice, the
list of them, the Node lookup) exponentially, with jitter so a fleet of nodes refused at the
same moment does not come back in step, up to a cap; only the item's own success clears it, so
nothing else (a watch event, a new inventory) can cut a wait short. ``TokenBucket`` bounds the
rate of every request of one client together, whatever mix of items and errors makes them: a
bug or an unforeseen error path can then cost the API server at most ``rate`` requests a
second from a node, never a storm.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

BACKOFF_START = 0.5  # seconds after the first failure of an item
BACKOFF_CAP = 30.0  # and never more than this
JITTER = 0.25  # each delay is drawn from [1 - JITTER, 1] of its nominal value


@dataclass
class _Failures:
    count: int
    not_before: float
    transient: bool  # no answer at all (the server away), not a refusal


@dataclass
class Backoff:
    """Per-item exponential backoff with jitter."""

    start: float = BACKOFF_START
    cap: float = BACKOFF_CAP
    jitter: float = JITTER
    rng: random.Random = field(default_factory=random.Random)
    _items: dict[str, _Failures] = field(default_factory=dict)

    def failed(self, key: str, now: float, *, transient: bool = False) -> float:
        """Record a failure of ``key``; the delay until it may be tried again."""
        count = self._items[key].count + 1 if key in self._items else 1
        nominal: float = min(self.cap, self.start * 2.0 ** min(count - 1, 32))
        delay = nominal * (1 - self.jitter * self.rng.random())
        self._items[key] = _Failures(count, now + delay, transient)
        return delay

    def succeeded(self, key: str) -> None:
        self._items.pop(key, None)

    def not_before(self, key: str) -> float:
        """When ``key`` may be tried again (-inf: now)."""
        failures = self._items.get(key)
        return -math.inf if failures is None else failures.not_before

    def failures(self, key: str) -> int:
        failures = self._items.get(key)
        return 0 if failures is None else failures.count

    def earliest(self, after: float) -> float | None:
        """The soonest time after ``after`` that an item in backoff may be tried again; None
        when there is none (an item whose time came before ``after`` was tried then, or is no
        longer wanted)."""
        return min((f.not_before for f in self._items.values() if f.not_before > after),
                   default=None)  # fmt: skip

    def server_back(self) -> None:
        """The server answered again (a watch started): items that failed only because it was
        away may go at once; refusals keep their backoff."""
        self._items = {k: f for k, f in self._items.items() if not f.transient}


@dataclass
class TokenBucket:
    """At most ``rate`` requests a second on average, ``burst`` at once, and never more than
    ``max_wait`` seconds of requests queued: a reservation that would wait longer is refused
    with nothing taken, and one given up before its request went (its caller timed out or was
    cancelled) is refunded. So no burst, however large, puts the bucket into a debt that later
    requests pay for: once the callers are gone, so are their tokens."""

    rate: float = 5.0
    burst: float = 10.0
    max_wait: float = math.inf
    _tokens: float = field(default=math.nan)
    _at: float = field(default=-math.inf)

    def _refill(self, now: float) -> None:
        if math.isnan(self._tokens):
            self._tokens, self._at = self.burst, now
        self._tokens = min(self.burst, self._tokens + max(0.0, now - self._at) * self.rate)
        self._at = max(self._at, now)

    def reserve(self, now: float) -> float | None:
        """Take a token; how long to wait before using it (0: go now), or None where that wait
        would pass ``max_wait`` (then nothing is taken)."""
        self._refill(now)
        wait = 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate
        if wait > self.max_wait:
            return None
        self._tokens -= 1
        return wait

    def refund(self, now: float) -> None:
        """Give back the token of a reservation whose request was never sent."""
        self._refill(now)
        self._tokens = min(self.burst, self._tokens + 1)

    def queued(self, now: float) -> float:
        """Seconds of reserved requests still waiting for their turn (0 when none wait)."""
        self._refill(now)
        return max(0.0, -self._tokens / self.rate)
