"""The private directory a socket is bound in before it is renamed into place, and the removal
of only the sockets this process bound."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from kae_deviceplugin.kubelet import sockets
from kae_deviceplugin.kubelet.sockets import private_directory, remove_own_socket


def test_a_private_directory_is_new_hidden_and_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        first, second = private_directory(tmp_path), private_directory(tmp_path)
    finally:
        os.umask(old)
    assert first != second
    for path in (first, second):
        assert Path(path).parent == tmp_path and Path(path).name.startswith(".kae-")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
        assert not os.listdir(path)


def test_a_taken_name_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A name already there (a stale directory, anyone's file) is never reused: the next try."""
    draws = iter([b"\x01" * 8, b"\x01" * 8, b"\x02" * 8])
    monkeypatch.setattr(os, "urandom", lambda n: next(draws))
    taken = private_directory(tmp_path)
    assert private_directory(tmp_path) != taken
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".kae-" + "01" * 8,
        ".kae-" + "02" * 8,
    ]


def test_no_free_name_at_all_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "urandom", lambda n: b"\x03" * n)
    (tmp_path / (".kae-" + "03" * 8)).touch()
    with pytest.raises(FileExistsError, match="no unused private directory name"):
        private_directory(tmp_path)
    assert len(list(tmp_path.iterdir())) == 1
    assert sockets.PRIVATE_NAME_TRIES > 1


def _listening(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    return server


def test_only_the_socket_this_process_bound_is_removed(tmp_path: Path) -> None:
    """A socket at our name that another instance bound after ours (another inode) stays, and
    so does a regular file put there; our own socket goes."""
    path = tmp_path / "kae.sock"
    ours = _listening(path)
    st = os.lstat(path)
    identity = (st.st_dev, st.st_ino)
    path.rename(tmp_path / "moved.sock")  # ours lives on elsewhere: its inode stays taken
    theirs = _listening(path)  # a second instance at the same name
    try:
        assert not remove_own_socket(path, identity)
        assert path.is_socket()
    finally:
        theirs.close()
        ours.close()
    path.unlink()
    path.write_text("not a socket")
    assert not remove_own_socket(path, identity) and path.is_file()
    path.unlink()
    ours = _listening(path)
    st = os.lstat(path)
    try:
        assert remove_own_socket(path, (st.st_dev, st.st_ino))
        assert not path.exists()
    finally:
        ours.close()
