"""Wake up when entries of a directory are created, removed or renamed (Linux inotify).

Watching the device-plugin directory this way notices a kubelet restart (kubelet.sock deleted and
re-created, our sockets deleted) at once, without polling 20 times a second. Where inotify cannot
be had, ``DirWatch`` reports ``available = False`` and the caller polls instead. The inotify calls
are discovery's wrapper (:mod:`kae_deviceplugin.discovery.entry_watch`), the one in the package.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from kae_deviceplugin.discovery.entry_watch import (
    ENTRY_MASK,
    IN_ATTRIB,
    EntryWatch,
    created_names,
)

log = logging.getLogger(__name__)

# Entry events, and attribute changes of the directory itself (its mode changed under us).
WATCH_MASK = IN_ATTRIB | ENTRY_MASK

__all__ = ["WATCH_MASK", "DirWatch", "created_names"]


class DirWatch:
    """An inotify watch on one directory, delivering "something changed" to a callback."""

    def __init__(self, directory: Path, on_change: Callable[[frozenset[str]], None]) -> None:
        self.directory = directory
        self.on_change = on_change
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watch = EntryWatch.open()
        if self._watch is not None and not self._watch.add(str(directory), WATCH_MASK):
            self._watch.close()
            self._watch = None

    @property
    def fd(self) -> int:
        return -1 if self._watch is None else self._watch.fd

    @property
    def available(self) -> bool:
        return self._watch is not None and self._watch.fd >= 0

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.available:
            self._loop = loop
            loop.add_reader(self.fd, self._drain)

    def _drain(self) -> None:
        assert self._watch is not None  # the reader is installed only while available
        self.on_change(frozenset(created_names(self._watch.drain())))

    def close(self) -> None:
        if self._loop is not None and self.available:
            self._loop.remove_reader(self.fd)
        if self._watch is not None:
            self._watch.close()
            self._watch = None
