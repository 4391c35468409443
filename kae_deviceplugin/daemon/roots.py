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


class _Stopped(Exception):
    """Raised inside the task group when a stop was asked for: it cancels every root task."""


async def _stop_when(stopping: asyncio.Event) -> None:
    await stopping.wait()
    raise _Stopped


async def supervise(roots: list[Coroutine[Any, Any, None]], stopping: asyncio.Event) -> int:
    """Run ``roots`` until ``stopping`` is set (0) or one of them fails; the exit code.

    A root task that returns has simply finished its work (an optional part with nothing to
    do); one that raises cancels the others, as ``asyncio.TaskGroup`` does.
    """
    try:
        async with asyncio.TaskGroup() as group:
            for coro in roots:
                group.create_task(coro)
            group.create_task(_stop_when(stopping))
    except BaseExceptionGroup as failed:
        return _exit_code(failed)
    return 0  # not reached: the group ends only through _stop_when's raise or a failure


def _exit_code(failed: BaseExceptionGroup[BaseException]) -> int:
    """The first failure's code: a refusal's own, 1 for a bug; 0 when only a stop was asked."""
    code = 0
    for error in _leaves(failed):
        if isinstance(error, _Stopped):
            continue
        if isinstance(error, KaeDevicePluginError):  # a refusal we explain in one line
            log.critical("stopping: %s", error)
            code = code or error.exit_code
        else:  # a bug: the traceback is what a report needs
            log.critical("stopping: a root task failed", exc_info=error)
            code = code or 1
    return code


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            yield from _leaves(error)
        else:
            yield error


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
