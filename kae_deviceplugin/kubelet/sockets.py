"""Unix socket hygiene: refuse symlinks, remove stale sockets, never steal a live one."""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path

from kae_deviceplugin.errors import SocketInUse, UnsafeSocketPath


def is_live(path: Path) -> bool:
    """True if some process accepts connections on the unix socket at ``path``."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def prepare_socket_path(path: Path) -> None:
    """Make ``path`` free for a new socket, or raise if that would be unsafe.

    A socket left by a killed instance is removed; one that still answers belongs to a live
    instance and is an error; a symlink or any other kind of file is never followed or deleted.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeSocketPath(f"{path} is a symlink; refusing to follow it")
    if not stat.S_ISSOCK(st.st_mode):
        raise UnsafeSocketPath(f"{path} exists and is not a socket; refusing to replace it")
    if is_live(path):
        raise SocketInUse(f"{path} is served by another live process (another plugin instance?)")
    try:
        path.unlink()
    except OSError as err:
        if err.errno != errno.ENOENT:
            raise


def file_identity(path: Path) -> tuple[int, int, int] | None:
    """(device, inode, ctime) of ``path`` without following links, None if it is absent."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)
