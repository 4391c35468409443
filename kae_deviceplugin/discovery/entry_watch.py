"""The one inotify wrapper: entries of some directories created, removed or renamed.

Two users share it. The incremental scanner asks once per tick whether anything moved under the
directories it watches (:meth:`EntryWatch.moved`: one non-blocking read, nothing to read when
nothing happened): off sysfs (the fake trees of tests and benchmarks, on tmpfs) a per-tick file
can be replaced under its kept descriptor (an atomic rename, as the trees change attributes) or
removed, and a ``pread`` of the old descriptor still answers the old bytes; every such change is
also an entry event in the file's directory, so one read replaces an ``fstat`` per file. Any
event (or a lost one: the queue overflowed) only sends the tick down the slow path, which checks
every file. On sysfs none of this is used (a removed device's files read ENODEV, and sysfs sends
no inotify events for attributes). The daemon's kubelet-directory watch (``daemon/dirwatch.py``)
reads the same descriptor from its event loop and wants the names created (:func:`created_names`).

Where inotify cannot be had (no libc symbol, out of instances or watches), :meth:`EntryWatch.open`
or :meth:`EntryWatch.add` says so and the caller falls back (link counts, polling).

Why not a library such as ``inotify_simple``: it finds libc with ``ctypes.util.find_library``
(``ldconfig`` in a subprocess at start), asks ``FIONREAD`` before every read (an ioctl more per
quiet tick), raises where a fallback is wanted, and importing it cost 3.5 MiB of RSS here. The
wrapper below is the few calls the daemon needs, one syscall per quiet read.
"""

from __future__ import annotations

import ctypes
import os
import struct

IN_ATTRIB = 0x00000004
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
# Entries coming, going or renamed, and the directory itself going (IN_Q_OVERFLOW always comes).
ENTRY_MASK = IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
_READ_SIZE = 64 * 1024
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name


def libc() -> ctypes.CDLL | None:
    """The C library's inotify calls, or None. ``CDLL(None)`` is the process's own symbol table
    (libc is in it), so no ``find_library``, which runs ``ldconfig`` in a subprocess."""
    try:
        library = ctypes.CDLL(None, use_errno=True)
        library.inotify_init1  # noqa: B018 -- probe: glibc and musl have it, others may not
        library.inotify_add_watch  # noqa: B018
    except (OSError, AttributeError):
        return None
    return library


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


class EntryWatch:
    """A non-blocking inotify descriptor over any number of directories."""

    def __init__(self, library: ctypes.CDLL, fd: int) -> None:
        self._library = library
        self.fd = fd
        self.watched: set[str] = set()

    @classmethod
    def open(cls) -> EntryWatch | None:
        library = libc()
        if library is None:
            return None
        fd = library.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        return cls(library, fd) if fd >= 0 else None

    def add(self, directory: str, mask: int = ENTRY_MASK) -> bool:
        """Watch ``directory``; False when the kernel refuses (e.g. out of watches). Asked
        again for a path already watched, the kernel watches what is there now: the same
        directory keeps its one watch, a directory re-created under that path gets one."""
        if self._library.inotify_add_watch(self.fd, os.fsencode(directory), mask) < 0:
            return False
        self.watched.add(directory)
        return True

    def drain(self) -> bytes:
        """Every event queued since the last call, as the kernel wrote them (b"" for none)."""
        chunks = []
        try:
            while chunk := os.read(self.fd, _READ_SIZE):
                chunks.append(chunk)
        except BlockingIOError:
            pass  # the queue is empty: the usual answer, one syscall
        return b"".join(chunks)

    def moved(self) -> bool:
        """Whether any event came since the last call (all of them are read now)."""
        return bool(self.drain())

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
