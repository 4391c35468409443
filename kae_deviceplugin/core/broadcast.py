"""A broadcast "latest value": any number of readers each see every value that was current.

Readers that fall behind skip straight to the newest value, which is what ListAndWatch wants:
every message is the full list, so an intermediate one is never needed. Readers end when their
task is cancelled (the gRPC server cancels streams when it stops).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Generic, TypeVar

T = TypeVar("T")


class LatestValue(Generic[T]):
    def __init__(self, initial: T) -> None:
        self._value = initial
        self._version = 0
        self._changed = asyncio.Event()

    @property
    def value(self) -> T:
        return self._value

    def publish(self, value: T) -> None:
        self._value = value
        self._version += 1
        # Every waiter holds the event it started waiting on; replacing it means a waiter
        # woken late still sees "changed" and never misses a publish.
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def updates(self) -> AsyncIterator[tuple[int, T]]:
        """The current value at once, then each newer one."""
        seen = -1
        while True:
            if self._version != seen:
                seen = self._version
                yield seen, self._value
                continue
            await self._changed.wait()


async def wait_until_set(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds; whether it was set.

    Not ``asyncio.wait_for``: on Python 3.11 it can swallow a cancellation that arrives just as
    the awaited event is set (CPython issue 86296), and a loop written around it then runs on
    after its task was cancelled, so the daemon never stops. ``asyncio.timeout`` tells its own
    timeout apart from a cancellation from outside.
    """
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True
