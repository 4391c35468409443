"""Whether a directory's entries changed since the last look: one ``getdents64`` per look.

Without uevents a quiet tick must still notice a ``class/uacce`` entry coming or going, and
sysfs offers no event for that. ``os.listdir`` answers, but opens the directory, reads it in
two ``getdents64`` calls, closes it and makes a string per entry (about 0.4 us an entry here).
:class:`DirEntries` keeps the directory open and compares the kernel's raw answer, as bytes,
with the one it got last: ``lseek`` to 0 and one ``getdents64`` into a buffer kept for it.
While nothing changed the bytes are the same (names, inode numbers and offsets of the same
entries in the same order); any difference only sends the tick down its slow path, which lists
the directory properly. Where libc has no ``getdents64`` (glibc before 2.30) the look is a
listing compared with the last one, as before.
"""

from __future__ import annotations

import ctypes
import os

_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FIRST_BUFFER = 32 * 1024


def _getdents() -> ctypes._NamedFuncPointer | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).getdents64
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_ssize_t
    function.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    return function


_GETDENTS = _getdents()


class DirEntries:
    """A directory kept open, and what reading its entries gave last time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1
        self._buffer = ctypes.create_string_buffer(_FIRST_BUFFER)
        self._last: bytes | list[str] | None = None
        if _GETDENTS is not None:
            try:
                self.fd = os.open(path, _FLAGS)
            except OSError:
                self.fd = -1  # looks then list the directory, and fail as listing fails
        self._last = self._read()

    def _read(self) -> bytes | list[str] | None:
        """The directory's entries as the kernel gives them; None when it cannot be read."""
        if self.fd < 0 or _GETDENTS is None:
            try:
                return os.listdir(self.path)
            except OSError:
                return None
        while True:
            os.lseek(self.fd, 0, os.SEEK_SET)
            size = len(self._buffer)
            got = _GETDENTS(self.fd, self._buffer, size)
            if got < 0:
                return None
            if got < size:  # all of it (a full buffer may have left entries unread)
                return ctypes.string_at(self._buffer, got)
            self._buffer = ctypes.create_string_buffer(2 * size)

    def remember(self) -> None:
        """Take the entries as they are now as what :meth:`same` compares with."""
        self._last = self._read()

    def same(self) -> bool:
        """Whether the entries are as they were when last remembered (or may have moved)."""
        try:
            now = self._read()
        except OSError:
            return False
        return now is not None and now == self._last

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
