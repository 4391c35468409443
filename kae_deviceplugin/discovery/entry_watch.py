"""Whether any entry of some directories was created, removed or renamed: one read per tick.

Off sysfs (the fake trees of tests and benchmarks, on tmpfs) a per-tick file can be replaced
under its kept descriptor (an atomic rename, as the trees change attributes) or removed, and a
``pread`` of the old descriptor still answers the old bytes. Asking each kept file for its link
count (an ``fstat`` each, every tick) notices that but doubles the syscalls of a quiet tick.
Every such change is also an entry event in the file's directory, so :class:`EntryWatch` watches
those directories with inotify and a quiet tick reads its descriptor once, non-blocking: nothing
to read, nothing was replaced. Any event (or a lost one: the queue overflowed) only sends the tick
down the slow path, which checks every file as before. On sysfs none of this is used (a removed
device's files read ENODEV, and sysfs sends no inotify events for attributes).

Where inotify cannot be had (no libc symbol, out of instances or watches), :meth:`EntryWatch.open`
or :meth:`EntryWatch.add` says so and the caller goes on checking link counts.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
# Entries coming, going or renamed, and the directory itself going (IN_Q_OVERFLOW always comes).
ENTRY_MASK = IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
_READ_SIZE = 64 * 1024


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


class EntryWatch:
    """An inotify descriptor over any number of directories; ``moved()`` drains and tells."""

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

    def add(self, directory: str) -> bool:
        """Watch ``directory`` (once); False when the kernel refuses (e.g. out of watches)."""
        if directory in self.watched:
            return True
        if self._library.inotify_add_watch(self.fd, os.fsencode(directory), ENTRY_MASK) < 0:
            return False
        self.watched.add(directory)
        return True

    def moved(self) -> bool:
        """Whether any event came since the last call (all of them are read now)."""
        seen = False
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, _READ_SIZE):
                seen = True
        return seen

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
