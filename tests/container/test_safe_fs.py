"""The descriptor-based file primitives: no symlink followed, explicit modes, nothing in the way."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from kae_deviceplugin.container import safe_fs


def test_a_symlinked_directory_is_refused_naming_it(tmp_path: Path) -> None:
    """open_subdir on a symlink to a directory raises UnsafePath naming the path; the target
    is not touched."""
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with safe_fs.open_root(tmp_path) as root, pytest.raises(safe_fs.UnsafePath) as caught:
        safe_fs.open_subdir(root, "link", tmp_path / "link")
    assert str(tmp_path / "link") in str(caught.value) and "symlink" in str(caught.value)
    with pytest.raises(safe_fs.UnsafePath), safe_fs.open_root(tmp_path / "link"):
        pass


def test_a_configured_directory_that_is_a_file_fails(tmp_path: Path) -> None:
    """A regular file where the configured directory should be: NotADirectoryError."""
    (tmp_path / "state").write_text("x")
    with pytest.raises(NotADirectoryError), safe_fs.open_root(tmp_path / "state"):
        pass


def test_files_get_their_mode_whatever_the_umask(tmp_path: Path) -> None:
    """write_file makes 0644 under umask 077 and under umask 000, and open_subdir makes 0755."""
    old = os.umask(0o077)
    try:
        with safe_fs.open_root(tmp_path) as root:
            safe_fs.write_file(root, "spec.json", b"{}")
            os.close(safe_fs.open_subdir(root, "view", tmp_path / "view"))
        os.umask(0)
        with safe_fs.open_root(tmp_path) as root:
            safe_fs.write_file(root, "other.json", b"{}")
    finally:
        os.umask(old)
    for name, mode in (("spec.json", 0o644), ("other.json", 0o644), ("view", 0o755)):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name


def test_write_and_link_replace_whatever_is_in_the_way(tmp_path: Path) -> None:
    """A symlink where a file goes, a full directory where a link goes: both are replaced,
    and neither the symlink's target nor anything outside is changed."""
    outside = tmp_path / "outside"
    outside.write_text("keep")
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / "file").symlink_to(outside)
    (directory / "link").mkdir()
    (directory / "link" / "inner").symlink_to(outside)
    with safe_fs.open_root(directory) as root:
        assert safe_fs.read_file(root, "file") is None  # a symlink is never read through
        safe_fs.write_file(root, "file", b"new")
        safe_fs.replace_symlink(root, "link", "/run/kae/pci/x")
        assert safe_fs.read_link(root, "link") == "/run/kae/pci/x"
        assert safe_fs.read_file(root, "file") == b"new"
    assert outside.read_text() == "keep"
    assert not (directory / "file").is_symlink()
    assert sorted(p.name for p in directory.iterdir()) == ["file", "link"]


def test_a_fifo_is_not_read(tmp_path: Path) -> None:
    """read_file on a FIFO returns None at once instead of waiting for a writer."""
    os.mkfifo(tmp_path / "fifo")
    with safe_fs.open_root(tmp_path) as root:
        assert safe_fs.read_file(root, "fifo") is None


def test_read_regular_file_is_none_only_when_absent(tmp_path: Path) -> None:
    """The strict reader: a regular file's bytes, None when absent, and an OSError for
    everything else (ELOOP for a symlink, NotRegularFile naming a FIFO or a directory, opened
    without blocking), where the lax read_file says None to all of them."""
    (tmp_path / "file").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    with safe_fs.open_root(tmp_path) as root:
        assert safe_fs.read_regular_file(root, "file") == b"data"
        assert safe_fs.read_regular_file(root, "absent") is None
        with pytest.raises(OSError) as caught:
            safe_fs.read_regular_file(root, "link")
        assert caught.value.errno == errno.ELOOP
        for name, kind in (("fifo", "a FIFO"), ("dir", "a directory")):
            with pytest.raises(safe_fs.NotRegularFile, match=kind):
                safe_fs.read_regular_file(root, name)
            assert safe_fs.read_file(root, name) is None
