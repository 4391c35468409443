"""Unix socket hygiene for every kubelet plugin: refuse symlinks, remove stale sockets, never
steal a live one, and bind a gRPC server so that its socket is never reachable before it is 0600."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from pathlib import Path

import grpc

from kae_deviceplugin.errors import EXIT_ENVIRONMENT, SocketInUse, StartupError, UnsafeSocketPath
from kae_deviceplugin.kubelet.socket_names import fits


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


SocketIdentity = tuple[int, int]  # (device, inode) of a socket file this process bound


def remove_own_socket(path: Path, identity: SocketIdentity) -> bool:
    """Remove ``path`` only if it is still the socket this process bound there (``identity``,
    from ``bind_privately``): never a socket another instance bound at the same name, nor a
    file someone put in its place. Whether it was removed."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISSOCK(st.st_mode) or (st.st_dev, st.st_ino) != identity:
        return False
    try:
        path.unlink()
    except OSError:
        return False
    return True


class BoundSockets:
    """The sockets one process bound (``bind``), the only ones it removes (``remove_all``): a
    second instance that finds the names served exits, and must not take the live one's
    sockets along."""

    def __init__(self) -> None:
        self._bound: dict[Path, SocketIdentity] = {}

    async def bind(self, server: grpc.aio.Server, path: Path) -> None:
        """Make ``path`` free (``prepare_socket_path``) and bind ``server`` there privately."""
        prepare_socket_path(path)
        st = await bind_privately(server, path)
        self._bound[path] = (st.st_dev, st.st_ino)

    def remove_all(self) -> None:
        bound, self._bound = self._bound, {}
        for path, identity in bound.items():
            remove_own_socket(path, identity)


def file_identity(path: Path) -> tuple[int, int, int] | None:
    """(device, inode, ctime) of ``path`` without following links, None if it is absent."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


# Tries at an unused name: 64 random bits collide with a present entry practically never.
PRIVATE_NAME_TRIES = 16


def private_directory(parent: Path) -> str:
    """A new directory ``.kae-<random>`` in ``parent``, mode 0700 (a umask can only take bits
    away, never give them to others). What ``tempfile.mkdtemp`` does, written out so that the
    daemon does not keep tempfile loaded, nor with it shutil, bz2 and lzma (~0.8 MiB)."""
    for _ in range(PRIVATE_NAME_TRIES):
        path = os.path.join(parent, f".kae-{os.urandom(8).hex()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(errno.EEXIST, "no unused private directory name", str(parent))


async def bind_privately(server: grpc.aio.Server, socket_path: Path) -> os.stat_result:
    """Start ``server`` on ``socket_path``, a socket that is never reachable before it is 0600.

    gRPC creates the socket itself, with the mode the process umask allows. Changing the umask
    would affect every thread creating files meanwhile, so instead the socket is bound in a
    fresh 0700 directory beside its final place, made 0600 there and renamed into place (a
    listening unix socket keeps working under its new name). The directory's name starts with
    a dot, which the kubelet's plugin watcher ignores. Returns the socket's stat at its place.
    """
    private = private_directory(socket_path.parent)
    # A random name: gRPC unlinks the address it bound when it stops, by then a name in no
    # directory (this one is gone, and a /proc/self/fd number may have been reused).
    bound = os.path.join(private, f"s{os.urandom(4).hex()}")
    directory_fd: int | None = None
    try:
        address = bound
        if not fits(private, os.path.basename(bound)):
            directory_fd, address = bind_address_through_fd(private, os.path.basename(bound))
        # "unix:<path>", not "unix://<path>": gRPC's server takes 2 bytes less of the latter
        # (105), a client and the kubelet dial 107.
        server.add_insecure_port(f"unix:{address}")
        await server.start()
        os.chmod(bound, 0o600)
        os.rename(bound, socket_path)
        return os.stat(socket_path)
    finally:
        if directory_fd is not None:
            os.close(directory_fd)
        with contextlib.suppress(OSError):
            os.unlink(bound)
        with contextlib.suppress(OSError):
            os.rmdir(private)


def bind_address_through_fd(directory: str, name: str) -> tuple[int, str]:
    """(fd, address): a unix socket address for ``directory/name`` when that path is too long
    for one (108 bytes): the same directory reached through ``/proc/self/fd/<fd>``, which the
    kernel resolves, so the address is about 40 bytes whatever the directory's depth. The
    caller closes ``fd`` once bound."""
    fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    return fd, f"/proc/self/fd/{fd}/{name}"


def prepare_socket_dir(directory: Path, what: str) -> None:
    """Create (if needed) the directory our sockets go in, or say in one line why it cannot."""
    fix = f"run as root, or mount the kubelet's {what} directory read-write"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StartupError(
            f"{directory} exists and is not a directory; remove it or point the daemon at the "
            f"kubelet's {what} directory",
            code=EXIT_ENVIRONMENT,
        ) from None
    except OSError as err:
        cause = "permission denied" if err.errno in (errno.EACCES, errno.EPERM) else err.strerror
        raise StartupError(
            f"{directory}: cannot create the socket directory ({cause}); {fix}",
            code=EXIT_ENVIRONMENT,
        ) from None
    if not directory.is_dir():
        raise StartupError(f"{directory} is not a directory; {fix}", code=EXIT_ENVIRONMENT)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StartupError(
            f"{directory}: not writable, so no socket can be created there; {fix}",
            code=EXIT_ENVIRONMENT,
        )
