"""Retry pacing: per-item exponential backoff with jitter and a cap that only the item's own
success clears, and a token bucket that bounds every request together."""

from __future__ import annotations

import random

from kae_deviceplugin.core.backoff import Backoff, TokenBucket
from kae_deviceplugin.errors import cause


def test_delays_double_within_their_jitter_up_to_the_cap() -> None:
    """Each failure doubles the nominal delay (0.5, 1, 2 ... 30), every drawn delay lies in
    [0.75, 1] of it, and the item may go again only after it."""
    backoff = Backoff(start=0.5, cap=30.0, jitter=0.25, rng=random.Random(7))
    for count in range(1, 12):
        nominal = min(30.0, 0.5 * 2 ** (count - 1))
        delay = backoff.failed("slice-0", now=100.0)
        assert 0.75 * nominal <= delay <= nominal
        assert backoff.not_before("slice-0") == 100.0 + delay
        assert backoff.failures("slice-0") == count


def test_only_the_items_own_success_clears_it() -> None:
    """Another item's success leaves it in backoff; its own clears it."""
    backoff = Backoff(rng=random.Random(1))
    backoff.failed("a", now=0.0)
    backoff.failed("b", now=0.0)
    backoff.succeeded("b")
    assert backoff.not_before("a") > 0.0
    backoff.succeeded("a")
    assert backoff.not_before("a") < 0.0 and backoff.failures("a") == 0


def test_the_server_coming_back_clears_only_what_failed_for_its_absence() -> None:
    """A refusal (403) keeps its backoff when the server answers again; a failure to reach it
    does not."""
    backoff = Backoff(rng=random.Random(2))
    backoff.failed("refused", now=0.0)
    backoff.failed("unreachable", now=0.0, transient=True)
    backoff.server_back()
    assert backoff.failures("refused") == 1 and backoff.failures("unreachable") == 0


def test_earliest_ignores_items_whose_time_came_before() -> None:
    """The soonest retry after a moment: an item due before it was tried (or is no longer
    wanted) and does not count."""
    backoff = Backoff(start=1.0, jitter=0.0)
    backoff.failed("early", now=0.0)  # due at 1
    backoff.failed("late", now=5.0)  # due at 6
    assert backoff.earliest(after=0.5) == 1.0
    assert backoff.earliest(after=2.0) == 6.0
    assert backoff.earliest(after=7.0) is None


def test_the_bucket_bounds_the_rate_whatever_asks() -> None:
    """1,000 requests asked at once at 5 a second with a burst of 10: the last one waits
    (1000 - 10) / 5 seconds, and each reservation waits no less than the one before."""
    bucket = TokenBucket(rate=5.0, burst=10.0)
    waits = [wait for _ in range(1000) if (wait := bucket.reserve(now=0.0)) is not None]
    assert len(waits) == 1000  # an unlimited queue refuses nothing
    assert waits[:10] == [0.0] * 10
    assert waits == sorted(waits)
    assert abs(waits[-1] - (1000 - 10) / 5.0) < 1e-9


def test_the_bucket_refills_at_its_rate() -> None:
    """Emptied, then 1 s later: five more go at once, the sixth waits."""
    bucket = TokenBucket(rate=5.0, burst=10.0)
    for _ in range(10):
        bucket.reserve(now=0.0)
    assert [bucket.reserve(now=1.0) for _ in range(5)] == [0.0] * 5
    assert (bucket.reserve(now=1.0) or 0.0) > 0.0


def test_a_reservation_past_the_longest_wait_is_refused_and_takes_nothing() -> None:
    """With at most 2 s of requests queued at 5 a second (burst 10): 10 go at once, 10 more
    wait up to 2 s, the 21st is refused, and a refusal leaves the queue as it was."""
    bucket = TokenBucket(rate=5.0, burst=10.0, max_wait=2.0)
    waits = [bucket.reserve(now=0.0) for _ in range(20)]
    assert None not in waits and waits[-1] == 2.0
    assert bucket.reserve(now=0.0) is None
    assert bucket.queued(now=0.0) == 2.0
    assert bucket.reserve(now=0.2) == 2.0  # one token came in: one more may queue


def test_refunds_leave_no_debt_after_a_burst_whose_callers_gave_up() -> None:
    """1,000 reservations at once, all but the 10 that went given up: the bucket is full
    again as soon as time has refilled what those 10 used, not 198 s later."""
    bucket = TokenBucket(rate=5.0, burst=10.0)
    waits = [bucket.reserve(now=0.0) for _ in range(1000)]
    assert waits[-1] == (1000 - 10) / 5.0  # no limit on waiting: the queue is that deep
    for _ in range(990):
        bucket.refund(now=1.0)
    assert bucket.queued(now=1.0) == 0.0
    assert [bucket.reserve(now=2.0) for _ in range(10)] == [0.0] * 10


def test_a_cause_is_never_empty() -> None:
    """An exception whose text is empty (asyncio's TimeoutError) still says what happened."""
    assert cause(TimeoutError()) == "no answer in time (timed out)"
    assert cause(ConnectionResetError()) == "ConnectionResetError"
    assert cause(ValueError("bad")) == "bad"
