"""The DRA plugin's record of prepared claims: one file, replaced atomically, read strictly.

The kubelet may ask to unprepare a claim after the claim is gone from the API server and after
this daemon restarted, so what Unprepare needs (the claim's CDI spec file) is written here
before NodePrepareResources answers. Its content and format versions (a tombstone per recent
unprepare, so two instances agree on a prepare an unprepare overtook) are in
``checkpoint_format``, whose names this module exports too.

It is replaced by a temporary file that is fsynced, renamed over the old one and followed by an
fsync of the directory (so the rename itself survives a power cut); a crash at any point leaves
the old file or the new one, never a mix. Both fsyncs are needed: without the first a power
cut can leave an empty file, which this daemon refuses to start on; without the second, a
prepared claim's record can vanish after NodePrepareResources answered, and with it what
Unprepare and the claims' status need. The claims' CDI specs are not fsynced: they are made
again from this file (``cdi_claims.write_spec``). Only a missing file is an empty checkpoint: a
symlink, a FIFO or a directory in its place, or any error reading it (EACCES, EIO), is
``CheckpointUnreadable``, and so is the plugin directory turned into a symlink or replaced by
another directory since the driver started; whoever reads it then changes nothing (no spec
removed, no smaller checkpoint written). Everything goes through directory descriptors
(``container.safe_fs``), so a symlink planted as the file is refused by readers and replaced by
writers, never followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from kae_deviceplugin.container import safe_fs
from kae_deviceplugin.dra.checkpoint_format import (
    MAX_TOMBSTONES,
    TOMBSTONE_TTL,
    VERSION,
    Checkpoint,
    PreparedClaim,
    PreparedDevice,
    Tombstone,
    claimed_queues,
    decode,
    encode,
)
from kae_deviceplugin.errors import CheckpointUnreadable

__all__ = [
    "MAX_TOMBSTONES",
    "TOMBSTONE_TTL",
    "VERSION",
    "Checkpoint",
    "CheckpointFile",
    "PreparedClaim",
    "PreparedDevice",
    "Tombstone",
    "claimed_queues",
    "decode",
    "encode",
]

REPLACED = (
    "replaced by another directory (or removed) while the driver ran; the driver changes "
    "nothing in it: put the original back, or restart the driver once no pod on this node "
    "holds a KAE claim"
)
FILE_NAME = "checkpoint.json"
FILE_MODE = 0o600  # claim names are not for every local user
UNREADABLE_FIX = (
    "the driver changes nothing until it can read it: put the file back as it was (a regular "
    "file), or remove it once no pod on this node holds a KAE claim"
)


def _stat_of(dir_fd: int, name: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def _unreadable(path: Path, err: OSError) -> CheckpointUnreadable:
    if isinstance(err, safe_fs.UnsafePath):
        why = str(err)
    elif isinstance(err, safe_fs.NotRegularFile):
        why = f"{path}: {err.strerror}"
    elif err.errno == errno.ELOOP:
        why = f"{path}: a symlink is in its place"
    else:
        why = f"{path}: {err.strerror or err}"
    return CheckpointUnreadable(f"{why}; {UNREADABLE_FIX}")


class CheckpointFile:
    """The checkpoint file in ``directory`` (the plugin's own directory under the kubelet's).

    The directory is the one it was when first opened: one replaced since (another directory,
    or a symlink, at its path) is refused, so records are never read from nor written to a
    directory the driver did not start with."""

    def __init__(self, directory: Path, name: str = FILE_NAME) -> None:
        self.directory = directory
        self.name = name
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the directory
        self._seen: tuple[int, ...] | None = None  # the file's stat at the last load or save

    @property
    def path(self) -> Path:
        return self.directory / self.name

    def _same_directory(self, fd: int) -> None:
        st = os.fstat(fd)
        identity = (st.st_dev, st.st_ino)
        if self._identity is None:
            self._identity = identity
        elif identity != self._identity:
            raise CheckpointUnreadable(f"{self.directory}: {REPLACED}")

    def load(self) -> Checkpoint:
        """The checkpoint on disk; empty when there is none. Raises CheckpointError (an
        unreadable file or directory is CheckpointUnreadable, never an empty checkpoint)."""
        with contextlib.ExitStack() as stack:
            try:
                fd = stack.enter_context(safe_fs.open_root(self.directory))
            except OSError as err:
                raise _unreadable(self.directory, err) from None
            self._same_directory(fd)
            try:
                data = safe_fs.read_regular_file(fd, self.name)
            except OSError as err:
                raise _unreadable(self.path, err) from None
            # Stat after the read: a write in between makes it look newer than the data, so
            # ``unchanged`` can only be wrong towards an older view.
            self._seen = _stat_of(fd, self.name)
        return Checkpoint() if data is None else decode(data, str(self.path))

    def unchanged(self) -> bool:
        """Whether the file is as this object last loaded or saved it (no other writer since),
        by its inode, size and times; False when it cannot tell."""
        try:
            with safe_fs.open_root(self.directory, create=False) as fd:
                return self._seen is not None and _stat_of(fd, self.name) == self._seen
        except OSError:
            return False

    def check(self) -> None:
        """CheckpointUnreadable when the directory was replaced or is a symlink now, or the
        file is there but no regular file: what readiness looks at, without reading it."""
        with contextlib.ExitStack() as stack:
            try:
                fd = stack.enter_context(safe_fs.open_root(self.directory, create=False))
            except FileNotFoundError:
                if self._identity is None:
                    return  # never opened: made at the first write
                raise CheckpointUnreadable(f"{self.directory}: {REPLACED}") from None
            except OSError as err:
                raise _unreadable(self.directory, err) from None
            self._same_directory(fd)
            try:
                mode = os.stat(self.name, dir_fd=fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                return  # no file (yet): an empty checkpoint
            except OSError as err:
                raise _unreadable(self.path, err) from None
        if stat.S_ISLNK(mode):
            raise _unreadable(self.path, OSError(errno.ELOOP, "a symlink"))
        if not stat.S_ISREG(mode):
            raise _unreadable(self.path, safe_fs.not_regular(mode))

    def read_only(self) -> Checkpoint:
        """The checkpoint for a reader that must change nothing on the node (doctor, list): a
        missing file or directory is an empty checkpoint and is never created; a symlink, a
        FIFO or a directory in the file's place is CheckpointUnreadable (never followed nor
        waited on). Raises CheckpointError, or OSError for a file it may not read (EACCES)."""
        try:
            fd = os.open(self.path, safe_fs.READ_FLAGS)
        except FileNotFoundError:
            return Checkpoint()
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            raise _unreadable(self.path, err) from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise _unreadable(self.path, safe_fs.not_regular(mode))
        with os.fdopen(fd, "rb") as file:
            return decode(file.read(), str(self.path))

    def save(self, checkpoint: Checkpoint) -> None:
        """Replace the file with ``checkpoint``; when this returns, a power cut keeps it. The
        caller holds the checkpoint lock, so a temporary file of another writer is a leftover
        of one that died, and goes."""
        with safe_fs.open_root(self.directory) as fd:
            try:
                self._same_directory(fd)
            except CheckpointUnreadable as err:  # an OSError: the caller takes its specs back
                raise safe_fs.UnsafePath(str(err)) from None
            safe_fs.remove_temporaries(fd, self.name)
            safe_fs.write_file(fd, self.name, encode(checkpoint), mode=FILE_MODE)
            safe_fs.fsync(fd)  # the rename lives in the directory: make it durable too
            self._seen = _stat_of(fd, self.name)
