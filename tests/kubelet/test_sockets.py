"""The private directory a socket is bound in before it is renamed into place."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kae_deviceplugin.kubelet import sockets
from kae_deviceplugin.kubelet.sockets import private_directory


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
