"""LatestValue, the broadcast every ListAndWatch stream reads, and wait_until_set, on a real loop.

Every wait is bounded (``DEADLINE``); a step that should not need the loop to run is checked
without yielding to it, so nothing here depends on timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kae_deviceplugin.core.broadcast import LatestValue, wait_until_set

DEADLINE = 10.0
T = TypeVar("T")


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    """Run one scenario on a fresh event loop, failing it rather than hanging past DEADLINE."""

    async def bounded() -> T:
        async with asyncio.timeout(DEADLINE):
            return await scenario()

    return asyncio.run(bounded())


async def next_update(updates: AsyncIterator[tuple[int, T]]) -> tuple[int, T]:
    """The next (version, value) of a reader, within the deadline."""
    async with asyncio.timeout(DEADLINE):
        return await anext(updates)


async def settle() -> None:
    """Let every ready task run until it blocks again (no time passes: ready callbacks only)."""
    for _ in range(10):
        await asyncio.sleep(0)


def test_value_is_the_initial_value_until_a_publish() -> None:
    """Before any publish, ``value`` is what the broadcast was made with; after, the latest."""
    latest = LatestValue("a")
    assert latest.value == "a"
    latest.publish("b")
    latest.publish("c")
    assert latest.value == "c"


def test_a_reader_gets_the_current_value_at_once_with_version_zero() -> None:
    """The first item comes without any publish: the initial value, as version 0."""

    async def scenario() -> tuple[int, str]:
        return await next_update(LatestValue("first").updates())

    assert run(scenario) == (0, "first")


def test_a_late_reader_starts_at_the_current_value_not_the_initial_one() -> None:
    """A reader that subscribes after three publishes sees only the third, as version 3."""

    async def scenario() -> tuple[int, int]:
        latest = LatestValue(0)
        for value in (1, 2, 3):
            latest.publish(value)
        return await next_update(latest.updates())

    assert run(scenario) == (3, 3)


def test_a_reader_that_falls_behind_skips_to_the_newest_value() -> None:
    """Publishes made while a reader is busy collapse into one item: the newest and its version."""

    async def scenario() -> list[tuple[int, str]]:
        latest = LatestValue("v0")
        updates = latest.updates()
        seen = [await next_update(updates)]
        for value in ("v1", "v2", "v3"):
            latest.publish(value)
        seen.append(await next_update(updates))
        return seen

    assert run(scenario) == [(0, "v0"), (3, "v3")]


def test_a_waiting_reader_wakes_on_a_publish_and_not_before() -> None:
    """A reader blocked after the current value stays blocked until a publish, then gets it."""

    async def scenario() -> None:
        latest = LatestValue("old")
        updates = latest.updates()
        assert await next_update(updates) == (0, "old")
        pending = asyncio.ensure_future(anext(updates))
        await settle()
        assert not pending.done()  # nothing published: the reader must still be waiting
        latest.publish("new")
        async with asyncio.timeout(DEADLINE):
            assert await pending == (1, "new")

    run(scenario)


def test_an_equal_value_is_still_a_new_version() -> None:
    """publish() does not compare values: republishing the same one wakes readers again
    (the servers compare the kubelet's view themselves before sending)."""

    async def scenario() -> list[tuple[int, str]]:
        latest = LatestValue("same")
        updates = latest.updates()
        seen = [await next_update(updates)]
        latest.publish("same")
        seen.append(await next_update(updates))
        return seen

    assert run(scenario) == [(0, "same"), (1, "same")]


def test_many_readers_all_end_at_the_latest_value() -> None:
    """Fifty readers, each with its own iterator, all see the final publish; none sees a
    version twice or out of order (a broadcast, not a queue the readers share)."""
    readers, last = 50, 5

    async def reader(latest: LatestValue[int]) -> list[int]:
        versions = []
        async for version, value in latest.updates():
            assert value == version * 10
            versions.append(version)
            if version == last:
                return versions
        raise AssertionError("updates() ended")

    async def scenario() -> list[list[int]]:
        latest = LatestValue(0)
        tasks = [asyncio.create_task(reader(latest)) for _ in range(readers)]
        for version in range(1, last + 1):
            await asyncio.sleep(0)  # let some readers take some versions, not necessarily all
            latest.publish(version * 10)
        return list(await asyncio.gather(*tasks))

    for versions in run(scenario):
        assert versions == sorted(set(versions)), versions
        assert versions[0] == 0
        assert versions[-1] == last


def test_a_cancelled_reader_does_not_disturb_the_others() -> None:
    """Cancelling a reader blocked in updates() ends it with CancelledError; a second reader
    blocked the same way still gets the next publish, and later readers work as before."""

    async def scenario() -> None:
        latest = LatestValue("a")
        doomed, survivor = latest.updates(), latest.updates()
        await next_update(doomed)
        await next_update(survivor)
        doomed_next = asyncio.ensure_future(anext(doomed))
        survivor_next = asyncio.ensure_future(anext(survivor))
        await settle()
        doomed_next.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed_next
        latest.publish("b")
        async with asyncio.timeout(DEADLINE):
            assert await survivor_next == (1, "b")
        assert await next_update(latest.updates()) == (1, "b")

    run(scenario)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 3), st.none()), max_size=30))
def test_a_reader_sees_each_version_with_its_own_value_in_order(steps: list[int | None]) -> None:
    """Any interleaving of publishes (None) and reader steps (n: let the loop run n times):
    the reader's versions strictly increase, each comes with the value published as that
    version, and once the publishes stop the reader ends at the latest one."""

    async def scenario() -> tuple[list[tuple[int, int]], int]:
        latest = LatestValue(0)
        seen: list[tuple[int, int]] = []
        published = 0

        async def reader() -> None:
            async for item in latest.updates():
                seen.append(item)

        task = asyncio.create_task(reader())
        for step in steps:
            if step is None:
                published += 1
                latest.publish(published)  # value == version: a mismatch is visible
            else:
                for _ in range(step):
                    await asyncio.sleep(0)
        await settle()
        task.cancel()
        return seen, published

    seen, published = run(scenario)
    assert all(version == value for version, value in seen), seen
    versions = [version for version, _ in seen]
    assert versions == sorted(set(versions)), versions
    assert versions[-1] == published


def test_wait_until_set_is_true_once_the_event_is_set() -> None:
    """A waiter returns True when another task sets the event before the timeout."""

    async def scenario() -> bool:
        event = asyncio.Event()
        waiter = asyncio.create_task(wait_until_set(event, DEADLINE))
        await settle()
        assert not waiter.done()
        event.set()
        return await waiter

    assert run(scenario) is True


def test_wait_until_set_is_false_when_the_timeout_passes() -> None:
    """An event nobody sets: False after the (short) timeout, not an exception."""

    async def scenario() -> bool:
        return await wait_until_set(asyncio.Event(), 0.01)

    assert run(scenario) is False


def test_wait_until_set_with_a_zero_timeout_reports_the_state_now() -> None:
    """Timeout 0: True for an event already set, False for one that is not (a poll)."""

    async def scenario() -> tuple[bool, bool]:
        is_set = asyncio.Event()
        is_set.set()
        return await wait_until_set(is_set, 0), await wait_until_set(asyncio.Event(), 0)

    assert run(scenario) == (True, False)


def test_wait_until_set_lets_a_cancellation_through() -> None:
    """Cancelling the waiting task raises CancelledError in it; it is not turned into False."""

    async def scenario() -> None:
        waiter = asyncio.create_task(wait_until_set(asyncio.Event(), DEADLINE))
        await settle()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert waiter.cancelled()

    run(scenario)


def test_a_cancellation_arriving_with_the_set_is_not_swallowed() -> None:
    """The event is set and the waiter cancelled in the same loop turn (the race that makes
    asyncio.wait_for on 3.11 return the result and lose the cancellation): the waiter must end
    cancelled, or a loop around it would run on after its task was told to stop."""

    async def scenario() -> None:
        event = asyncio.Event()
        waiter = asyncio.create_task(wait_until_set(event, DEADLINE))
        await settle()
        event.set()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert waiter.cancelled()

    run(scenario)
