"""File operations that never follow a symlink the daemon did not choose to follow.

The daemon runs as root and writes into directories other programs can reach: its state dir (a
hostPath), the CDI spec dir and NFD's features.d. A path-based ``unlink`` or ``open`` there follows
any symlink planted on the way, so a planted ``uacce-class -> /var/lib/kubelet/device-plugins``
would make the daemon empty the kubelet's directory. So every operation below a configured
directory goes through a directory file descriptor: entries are opened with ``O_NOFOLLOW``,
created with explicit modes (``fchmod`` after creation, so the process umask never matters) and
replaced with ``rename`` relative to that descriptor.

The configured directory itself is the operator's path: its ancestors are followed as written
(``/var/run`` is a symlink on most distributions), its last component is not.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
DIR_MODE = 0o755
FILE_MODE = 0o644
# O_NONBLOCK: opening a FIFO planted as the file must not block the daemon.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass
class FsyncCount:
    """The fsyncs this process made through ``fsync`` and the seconds they took: the DRA
    prepare path reports the difference over a call (everything there runs on one thread)."""

    calls: int = 0
    seconds: float = 0.0


FSYNCS = FsyncCount()


def fsync(fd: int) -> None:
    """``os.fsync``, counted in ``FSYNCS``."""
    started = time.perf_counter()
    try:
        os.fsync(fd)
    finally:
        FSYNCS.calls += 1
        FSYNCS.seconds += time.perf_counter() - started


class UnsafePath(OSError):
    """A path the daemon refuses to write through: a symlink, or a directory someone else owns."""


def _refuse_if_foreign(fd: int, path: Path) -> None:
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        raise UnsafePath(
            f"refusing to write into {path}: owned by uid {st.st_uid}, not by us ({os.geteuid()})"
        )


def _open_dir(name: str, dir_fd: int | None, path: Path, *, owned: bool) -> int:
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(name, dir_fd):
            raise UnsafePath(f"refusing to follow {path}: it is a symlink") from err
        raise
    try:
        if owned:
            _refuse_if_foreign(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_symlink(name: str, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


@contextlib.contextmanager
def open_root(path: Path, *, create: bool = True) -> Iterator[int]:
    """A descriptor of the configured directory ``path``, created (0755) if missing and asked."""
    parent, name = path.parent, path.name or "."
    if create and not parent.exists():
        parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = open_subdir(parent_fd, name, path, owned=False, create=create)
    finally:
        os.close(parent_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def open_subdir(
    dir_fd: int, name: str, path: Path, *, owned: bool = True, create: bool = True
) -> int:
    """The directory ``name`` under ``dir_fd``, made (0755) if missing; never through a symlink.

    ``owned``: also refuse a directory that another user owns (one we did not make). ``path`` is
    only for messages. The caller closes the descriptor.
    """
    created = False
    if create:
        try:
            os.mkdir(name, DIR_MODE, dir_fd=dir_fd)
            created = True
        except FileExistsError:
            pass
    fd = _open_dir(name, dir_fd, path, owned=owned)
    if created:
        os.fchmod(fd, DIR_MODE)  # mkdir's mode went through the umask
    return fd


def read_file(dir_fd: int, name: str) -> bytes | None:
    """The content of the regular file ``name``; None if it is absent, a symlink or not a file."""
    try:
        return read_regular_file(dir_fd, name)
    except OSError:  # a symlink, a FIFO or device (never blocked on nor fed from), a directory
        return None


class NotRegularFile(OSError):
    """A name that should hold a regular file holds something else (a FIFO, a directory)."""


def read_regular_file(dir_fd: int, name: str) -> bytes | None:
    """The content of the regular file ``name``; None only when it is absent. Anything else
    raises OSError rather than passing for absent: ELOOP for a symlink (never followed),
    NotRegularFile for a FIFO, a directory or a device (opened without blocking, never read),
    and the error itself for a permission or I/O error. For a file whose absence means
    "nothing recorded", which nothing else may be mistaken for."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise not_regular(mode)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as handle:  # fdopen itself refuses a directory: checked first
        return handle.read()


def not_regular(mode: int) -> NotRegularFile:
    """The error for a file of ``mode`` where a regular file belongs, naming what it is."""
    kinds = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket"}
    kind = next((kind for test, kind in kinds.items() if test(mode)), "a device")
    return NotRegularFile(errno.EINVAL, f"not a regular file ({kind})")


def remove_entry(dir_fd: int, name: str) -> None:
    """Delete ``name`` whatever it is (a directory with all it holds); absent is fine."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        # Imported here: a directory is removed only at exit (the view's) or where one is in the
        # way, and shutil brings bz2 and lzma, which the daemon would otherwise keep loaded.
        import shutil  # noqa: PLC0415

        # rmtree with dir_fd works through descriptors too and never follows a link inside.
        shutil.rmtree(name, dir_fd=dir_fd)
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


# Per process: during a rolling update two driver instances write the same files (the DRA
# checkpoint, a claim's CDI spec), and one must never remove or rename the other's half-written
# temporary file. The PID alone is not enough: two pods' PID namespaces can both have PID 1.
# (os.urandom is what secrets.token_hex reads; secrets would keep hashlib and hmac loaded.)
_INSTANCE = f"{os.getpid()}-{os.urandom(4).hex()}"
TEMPORARY_SUFFIX = ".tmp"


def _temporary(name: str) -> str:
    return f".{name}.{_INSTANCE}{TEMPORARY_SUFFIX}"


def remove_temporaries(dir_fd: int, name: str) -> None:
    """Remove every instance's temporary file of ``name``: leftovers of writers that died.
    Only for a caller that holds a lock keeping every other writer of ``name`` out."""
    prefix = f".{name}."
    for entry in os.listdir(dir_fd):
        if entry.startswith(prefix) and entry.endswith(TEMPORARY_SUFFIX):
            remove_entry(dir_fd, entry)


def replace_symlink(dir_fd: int, name: str, target: str) -> None:
    """Make ``name`` a symlink to ``target`` in one rename, replacing whatever is in the way."""
    temporary = _temporary(name)
    remove_entry(dir_fd, temporary)
    os.symlink(target, temporary, dir_fd=dir_fd)
    _rename_over(dir_fd, temporary, name)


def write_file(
    dir_fd: int, name: str, data: bytes, *, mode: int = FILE_MODE, durable: bool = True
) -> None:
    """Replace ``name`` atomically with a regular file holding ``data`` (readers see old or new).

    ``durable``: the data is fsynced before the rename, so a power cut after it leaves the old
    file or the new one, never an empty one. Without it a power cut can leave the file empty or
    missing: only for files the daemon writes again from its own record after a restart."""
    temporary = _temporary(name)
    remove_entry(dir_fd, temporary)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(fd, mode)  # the mode os.open applied went through the umask
            out.write(data)
            out.flush()
            if durable:
                fsync(fd)
        _rename_over(dir_fd, temporary, name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def _rename_over(dir_fd: int, source: str, name: str) -> None:
    try:
        os.rename(source, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except (IsADirectoryError, NotADirectoryError, OSError) as err:
        if err.errno not in (errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST):
            raise
        remove_entry(dir_fd, name)  # a directory sits where the entry goes
        os.rename(source, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def read_link(dir_fd: int, name: str) -> str | None:
    """Where the symlink ``name`` points; None if it is absent or not a symlink."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None
