"""How the HTTP endpoint's worker threads run work on the daemon's event loop, until it stops.

Every answer about the daemon is computed on its loop (one short callback, or a task such as a
scrape's pod-resources ask), waited for with a deadline. The HTTP server does not wait for its
workers when it stops: a worker may itself be waiting for the loop. So a scrape read just before
the stop can reach the loop after it, as late as the loop's own shutdown (``asyncio.run``
cancelling what is left, then closing). A task started then is never finished: the loop closes
with it pending and its coroutines, the pod-resources ask among them, are destroyed unfinished
("Exception ignored in: <coroutine object AllocationsSource._ask>").

So the endpoint ``close()``\\ s its ``LoopCalls`` on the loop before it stops: from then on a
call is refused (``LoopClosed``, a RuntimeError, answered 503 like a loop that does not answer)
without any coroutine being made, and the tasks already started are waited for (each is bounded
by its own deadline), so none is left when the loop ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopClosed(RuntimeError):
    """The endpoint stopped: it runs nothing more on the daemon's loop."""


class LoopCalls:
    """Calls from other threads into ``loop``, refused once ``close()`` ran."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._open = True  # read and written on the loop only, so no call races the close
        self._running: set[asyncio.Task[Any]] = set()  # started and not yet done

    def call(self, func: Callable[[], T], timeout: float) -> T:
        """Run ``func`` on the loop and return its result; TimeoutError if the loop does not
        in time, RuntimeError once the loop is closed or this is."""
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not self._open:
                done.set_exception(LoopClosed("the endpoint stopped"))
                return
            try:
                done.set_result(func())
            except Exception as err:
                done.set_exception(err)

        self.loop.call_soon_threadsafe(run)  # RuntimeError once the loop is closed
        return done.result(timeout)

    def awaited(self, func: Callable[[], Coroutine[Any, Any, T]], timeout: float) -> T:
        """Run the coroutine ``func()`` as a task on the loop; its result, or TimeoutError if it
        does not end in time (it runs on, and ``close`` waits for it), RuntimeError once the
        loop is closed or this is."""
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def finished(task: asyncio.Task[T]) -> None:
            self._running.discard(task)
            if task.cancelled():
                done.set_exception(LoopClosed("the call was cancelled"))
            elif (err := task.exception()) is not None:
                done.set_exception(err)
            else:
                done.set_result(task.result())

        def start() -> None:  # on the loop: the coroutine is made only where it will be awaited
            if not self._open:
                done.set_exception(LoopClosed("the endpoint stopped"))
                return
            task = self.loop.create_task(func())
            self._running.add(task)
            task.add_done_callback(finished)

        self.loop.call_soon_threadsafe(start)
        return done.result(timeout)

    async def close(self) -> None:
        """On the loop: refuse every call from now on, then wait for the started ones."""
        self._open = False
        if self._running:
            await asyncio.wait(set(self._running))
