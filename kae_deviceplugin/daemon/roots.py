"""Structured concurrency for the daemon: root tasks that live and die together, and signals.

If one root task fails, every other is cancelled and the process exits non-zero, so that the
DaemonSet restarts it rather than leaving a half-alive plugin. Our own refusals
(``KaeDevicePluginError``) are one line with their exit code; anything else is a bug and is
logged with its traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from kae_deviceplugin.errors import KaeDevicePluginError

log = logging.getLogger("kae_deviceplugin.daemon.supervisor")


async def run_until_one_ends(
    roots: list[Coroutine[Any, Any, None]], stopping: asyncio.Event
) -> int:
    """Run ``roots`` until ``stopping`` is set (0) or one of them ends; its exit code."""
    tasks = [asyncio.create_task(coro) for coro in roots]
    stop_waiter = asyncio.create_task(stopping.wait())
    done, _ = await asyncio.wait([*tasks, stop_waiter], return_when=asyncio.FIRST_COMPLETED)
    code = 0
    for task in done:
        if task is stop_waiter or task.cancelled() or task.exception() is None:
            continue
        error = task.exception()
        if isinstance(error, KaeDevicePluginError):  # a refusal we explain in one line
            log.critical("stopping: %s", error)
            code = error.exit_code
        else:  # a bug: the traceback is what a report needs
            log.critical("stopping: a root task failed", exc_info=error)
            code = 1
    for task in [*tasks, stop_waiter]:
        task.cancel()
    await asyncio.gather(*tasks, stop_waiter, return_exceptions=True)
    return code


@contextlib.contextmanager
def signal_handlers(
    loop: asyncio.AbstractEventLoop,
    stop: Callable[[int], None],
    reload: Callable[[], None],
    enabled: bool = True,
) -> Iterator[None]:
    """SIGTERM and SIGINT stop, SIGHUP reloads, while the block runs (main thread only)."""
    if not enabled:
        yield
        return
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    loop.add_signal_handler(signal.SIGHUP, reload)
    try:
        yield
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)
