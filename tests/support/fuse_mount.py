"""A small FUSE file system in pure Python: a directory served as is, its writes answered by code.

Tests need files that refuse a write with the errno the kernel would give (sysfs's ``sriov_numvfs``
answers EBUSY, ERANGE, EINVAL), which a plain directory cannot do. This speaks the kernel's FUSE
protocol (``include/uapi/linux/fuse.h``, protocol 7.31) on ``/dev/fuse`` directly: no libfuse, no
``fusermount`` (the tests run as root and call mount(2) themselves), one thread.

Everything is read through to the backing directory at each request (no attribute or name caching:
entries and timeouts of zero), so a test or the write handler changing the backing directory is
seen at once through the mount, as sysfs shows a device the moment the kernel adds it. Only files
the handler claims can be opened for writing (sysfs answers EACCES for attributes without a store
method); creating, removing or renaming anything through the mount is EPERM, as in sysfs.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import stat
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

# Opcodes (fuse.h, enum fuse_opcode).
_LOOKUP, _FORGET, _GETATTR, _SETATTR, _READLINK = 1, 2, 3, 4, 5
_OPEN, _READ, _WRITE, _STATFS, _RELEASE = 14, 15, 16, 17, 18
_GETXATTR, _LISTXATTR, _FLUSH, _INIT = 22, 23, 25, 26
_OPENDIR, _READDIR, _RELEASEDIR, _ACCESS = 27, 28, 29, 34
_INTERRUPT, _DESTROY, _BATCH_FORGET = 36, 38, 42
_NO_REPLY = {_FORGET, _BATCH_FORGET, _INTERRUPT}
_REFUSED = {6, 8, 9, 10, 11, 12, 13, 35, 43, 45}  # symlink mknod mkdir unlink rmdir ... rename2

_IN_HEADER = struct.Struct("<IIQQIIII")
_OUT_HEADER = struct.Struct("<IiQ")
_ATTR = struct.Struct("<QQQQQQIIIIIIIIII")
_INIT_OUT = struct.Struct("<IIIIHHIIHHI28x")
_READ_IN = struct.Struct("<QQI")
_WRITE_IN = struct.Struct("<QQII")
_WRITE_IN_SIZE = 40
_DIRENT = struct.Struct("<QQII")
_PROTOCOL = (7, 31)
_ATOMIC_O_TRUNC, _BIG_WRITES = 1 << 3, 1 << 5
_DIRECT_IO = 1  # FOPEN_DIRECT_IO: every read comes here, whatever size stat reported
_MAX_WRITE = 128 * 1024
_BUFFER = _MAX_WRITE + 4096
_MS_NOSUID, _MS_NODEV, _MS_RDONLY, _MNT_DETACH = 2, 4, 1, 2

# (path relative to the backing directory, bytes written) -> 0 or an errno.
WriteHandler = Callable[[str, bytes], int]


class FuseMount:
    """Serve ``backing`` at ``mountpoint`` until :meth:`close`; writes go to ``on_write``.

    ``writable(path)`` says which files may be opened for writing. ``read_only`` mounts with
    MS_RDONLY, so every write fails with EROFS before it reaches the handler (a read-only /sys).
    """

    def __init__(
        self,
        backing: Path,
        mountpoint: Path,
        on_write: WriteHandler,
        writable: Callable[[str], bool],
        *,
        read_only: bool = False,
    ) -> None:
        self._backing = backing
        self._mountpoint = mountpoint
        self._on_write = on_write
        self._writable = writable
        self._paths: dict[int, str] = {1: ""}
        self._ids: dict[tuple[str, int], int] = {}
        self._dirs: dict[int, list[str]] = {}
        self._next_fh = 1
        self._stop = threading.Event()
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = os.open("/dev/fuse", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        options = f"fd={self._fd},rootmode=40000,user_id=0,group_id=0,allow_other"
        flags = _MS_NOSUID | _MS_NODEV | (_MS_RDONLY if read_only else 0)
        if self._libc.mount(
            b"kae-test", str(mountpoint).encode(), b"fuse", flags, options.encode()
        ):
            code = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(code, f"mount fuse at {mountpoint}: {os.strerror(code)}")
        self._thread = threading.Thread(target=self._serve, name="fuse-sysfs", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Unmount (lazily, so a file left open cannot block it) and stop serving."""
        self._libc.umount2(str(self._mountpoint).encode(), _MNT_DETACH)
        self._stop.set()
        self._thread.join(timeout=30)
        os.close(self._fd)  # the last reference to the connection aborts whatever is left

    def __enter__(self) -> FuseMount:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the request loop ------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.2)
            if not ready:
                continue
            try:
                request = os.read(self._fd, _BUFFER)
            except BlockingIOError:
                continue
            except OSError:  # ENODEV: unmounted and aborted
                return
            self._answer(request)

    def _answer(self, request: bytes) -> None:
        _, opcode, unique, nodeid, *_ = _IN_HEADER.unpack_from(request)
        body = request[_IN_HEADER.size :]
        if opcode in _NO_REPLY:
            return
        try:
            payload = self._dispatch(opcode, nodeid, body)
            error = 0
        except OSError as exc:
            payload, error = b"", exc.errno or errno.EIO
        header = _OUT_HEADER.pack(_OUT_HEADER.size + len(payload), -error, unique)
        # The request may have been interrupted, or the mount be going away: nothing to answer.
        with contextlib.suppress(OSError):
            os.write(self._fd, header + payload)
        if opcode == _DESTROY:
            self._stop.set()

    def _dispatch(self, opcode: int, nodeid: int, body: bytes) -> bytes:
        handler = self._HANDLERS.get(opcode)
        if handler is not None:
            return handler(self, nodeid, body)
        if opcode in _REFUSED:
            raise OSError(errno.EPERM, "sysfs is not changed through files")
        raise OSError(errno.ENOSYS, "not served")

    # -- the operations --------------------------------------------------------------------

    def _init(self, _nodeid: int, body: bytes) -> bytes:
        _major, _minor, readahead, kernel_flags = struct.unpack_from("<IIII", body)
        flags = kernel_flags & (_ATOMIC_O_TRUNC | _BIG_WRITES)
        return _INIT_OUT.pack(*_PROTOCOL, readahead, flags, 16, 12, _MAX_WRITE, 1, 0, 0, 0)

    def _lookup(self, nodeid: int, body: bytes) -> bytes:
        name = body.rstrip(b"\0").decode()
        parent = self._paths[nodeid]
        path = f"{parent}/{name}" if parent else name
        st = os.lstat(self._backing / path)
        # A path made anew (a VF removed and added again) is a new node, as in sysfs.
        child = self._ids.get((path, st.st_ino))
        if child is None:
            child = len(self._paths) + 1
            self._ids[(path, st.st_ino)], self._paths[child] = child, path
        # nodeid, generation, entry and attribute timeouts of zero: nothing is cached
        return struct.pack("<QQQQII", child, 0, 0, 0, 0, 0) + _attr(st)

    def _getattr(self, nodeid: int, _body: bytes) -> bytes:
        return struct.pack("<QII", 0, 0, 0) + _attr(os.lstat(self._real(nodeid)))

    def _readlink(self, nodeid: int, _body: bytes) -> bytes:
        return os.readlink(self._real(nodeid)).encode()

    def _open(self, nodeid: int, body: bytes) -> bytes:
        (flags,) = struct.unpack_from("<I", body)
        if flags & os.O_ACCMODE != os.O_RDONLY and not self._writable(self._paths[nodeid]):
            raise OSError(errno.EACCES, "read-only attribute")
        self._real(nodeid).stat()
        return struct.pack("<QII", 0, _DIRECT_IO, 0)

    def _read(self, nodeid: int, body: bytes) -> bytes:
        _, offset, size = _READ_IN.unpack_from(body)
        with open(self._real(nodeid), "rb") as file:
            file.seek(offset)
            return file.read(size)

    def _write(self, nodeid: int, body: bytes) -> bytes:
        _, _, size, _ = _WRITE_IN.unpack_from(body)
        data = body[_WRITE_IN_SIZE : _WRITE_IN_SIZE + size]
        code = self._on_write(self._paths[nodeid], data)
        if code:
            raise OSError(code, os.strerror(code))
        return struct.pack("<II", size, 0)

    def _setattr(self, nodeid: int, _body: bytes) -> bytes:
        # A truncate on open for writing: sysfs ignores it, so does this.
        return self._getattr(nodeid, b"")

    def _opendir(self, nodeid: int, _body: bytes) -> bytes:
        fh, self._next_fh = self._next_fh, self._next_fh + 1
        self._dirs[fh] = [".", "..", *sorted(os.listdir(self._real(nodeid)))]
        return struct.pack("<QII", fh, 0, 0)

    def _readdir(self, nodeid: int, body: bytes) -> bytes:
        fh, offset, size = _READ_IN.unpack_from(body)
        out = b""
        for index, name in enumerate(self._dirs.get(fh, [])[offset:], start=offset + 1):
            entry = self._dirent(nodeid, name, index)
            if len(out) + len(entry) > size:
                break
            out += entry
        return out

    def _dirent(self, nodeid: int, name: str, next_offset: int) -> bytes:
        try:
            st = os.lstat(self._real(nodeid) / name)
            ino, kind = st.st_ino, stat.S_IFMT(st.st_mode) >> 12
        except OSError:
            ino, kind = 1, 0
        raw = name.encode()
        record = _DIRENT.pack(ino, next_offset, len(raw), kind) + raw
        return record + b"\0" * (-len(record) % 8)

    def _releasedir(self, _nodeid: int, body: bytes) -> bytes:
        (fh,) = struct.unpack_from("<Q", body)
        self._dirs.pop(fh, None)
        return b""

    def _empty(self, _nodeid: int, _body: bytes) -> bytes:
        return b""

    def _statfs(self, _nodeid: int, _body: bytes) -> bytes:
        return struct.pack("<QQQQQIIII24x", 0, 0, 0, 0, 0, 4096, 255, 4096, 0)

    def _no_xattr(self, _nodeid: int, _body: bytes) -> bytes:
        raise OSError(errno.ENOSYS, "no extended attributes")

    def _real(self, nodeid: int) -> Path:
        path = self._paths.get(nodeid)
        if path is None:
            raise OSError(errno.ESTALE, "unknown node")
        return self._backing / path

    _HANDLERS: ClassVar[dict[int, Callable[[FuseMount, int, bytes], bytes]]] = {
        _INIT: _init,
        _LOOKUP: _lookup,
        _GETATTR: _getattr,
        _SETATTR: _setattr,
        _READLINK: _readlink,
        _OPEN: _open,
        _READ: _read,
        _WRITE: _write,
        _RELEASE: _empty,
        _FLUSH: _empty,
        _OPENDIR: _opendir,
        _READDIR: _readdir,
        _RELEASEDIR: _releasedir,
        _STATFS: _statfs,
        _ACCESS: _empty,
        _GETXATTR: _no_xattr,
        _LISTXATTR: _no_xattr,
        _DESTROY: _empty,
    }


def _attr(st: os.stat_result) -> bytes:
    return _ATTR.pack(
        st.st_ino,
        st.st_size,
        st.st_blocks,
        int(st.st_atime),
        int(st.st_mtime),
        int(st.st_ctime),
        0,
        0,
        0,
        st.st_mode,
        st.st_nlink,
        st.st_uid,
        st.st_gid,
        0,
        4096,
        0,
    )
