"""Wake up when entries of a directory are created, removed or renamed (Linux inotify).

Watching the device-plugin directory this way notices a kubelet restart (kubelet.sock deleted and
re-created, our sockets deleted) at once, without polling 20 times a second. Where inotify cannot
be had, ``DirWatch`` reports ``available = False`` and the caller polls instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path

from kae_deviceplugin.discovery.entry_watch import (
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
)
from kae_deviceplugin.discovery.entry_watch import libc as inotify_libc

log = logging.getLogger(__name__)

IN_ATTRIB = 0x00000004
WATCH_MASK = (
    IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
)


_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name


def created_names(data: bytes) -> set[str]:
    """Names of the entries created (or moved in) that a buffer of inotify events reports.

    Identity checks alone can miss a re-created socket: the new file may get the old inode number
    and, on coarse clocks, the same ctime. A creation event cannot be missed that way.
    """
    names: set[str] = set()
    offset = 0
    while offset + _EVENT.size <= len(data):
        _wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
        start = offset + _EVENT.size
        if mask & (IN_CREATE | IN_MOVED_TO) and length:
            names.add(os.fsdecode(data[start : start + length].rstrip(b"\0")))
        offset = start + length
    return names


class DirWatch:
    """An inotify watch on one directory, delivering "something changed" to a callback."""

    def __init__(self, directory: Path, on_change: Callable[[frozenset[str]], None]) -> None:
        self.directory = directory
        self.on_change = on_change
        self.fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        libc = inotify_libc()
        if libc is None:
            return
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return
        if libc.inotify_add_watch(fd, os.fsencode(directory), WATCH_MASK) < 0:
            os.close(fd)
            return
        self.fd = fd

    @property
    def available(self) -> bool:
        return self.fd >= 0

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.available:
            self._loop = loop
            loop.add_reader(self.fd, self._drain)

    def _drain(self) -> None:
        created: set[str] = set()
        with contextlib.suppress(BlockingIOError):
            while data := os.read(self.fd, 65536):
                created.update(created_names(data))
        self.on_change(frozenset(created))

    def close(self) -> None:
        if self._loop is not None and self.available:
            self._loop.remove_reader(self.fd)
        if self.available:
            os.close(self.fd)
            self.fd = -1
