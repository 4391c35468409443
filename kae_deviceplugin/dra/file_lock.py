"""An advisory ``flock`` between the driver instances of one node, usable from asyncio.

During a rolling update two driver pods run on one node at once (the chart's ``maxSurge``)
and share the plugin directory under the kubelet's. They serialise on locks in that directory:
``checkpoint.lock`` around every read-modify-write of the checkpoint and its CDI specs, held
for milliseconds, and ``publisher.lock``, held by the one instance that publishes the pool
for as long as it runs. ``flock`` works across the pods' mount namespaces (one inode on the
host) and dies with its holder, so a killed instance never leaves a lock behind.

The lock is taken without blocking the event loop: a non-blocking try, then short sleeps
growing to ``poll_cap`` (a blocking ``flock`` in a thread could not be cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

POLL_START = 0.002
POLL_CAP = 0.05
LOCK_MODE = 0o600


class FileLock:
    """``flock(LOCK_EX)`` on ``path`` (created if absent, never followed if a symlink)."""

    def __init__(self, path: Path, *, poll_cap: float = POLL_CAP) -> None:
        self.path = path
        self.poll_cap = poll_cap
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if it is free; whether this instance holds it now."""
        if self._fd is not None:
            return True
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.path, flags, LOCK_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    async def acquire(self, timeout: float | None = None) -> None:
        """Wait for the lock; TimeoutError after ``timeout`` seconds."""
        delay = POLL_START
        async with asyncio.timeout(timeout):
            while not self.try_acquire():
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.poll_cap)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor drops the flock

    @contextlib.asynccontextmanager
    async def held_for(self, timeout: float | None = None) -> AsyncIterator[None]:
        """The lock for the block."""
        await self.acquire(timeout)
        try:
            yield
        finally:
            self.release()
