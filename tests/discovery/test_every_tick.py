"""The every-tick mode (no uevents): a quiet tick looks only where something can change (one
``getdents64`` of class/uacce, one read of an inotify watch of /dev and the driver links'
directories, a ``pread`` per kept file), and each change is still seen on the next tick with
the full scan's answer. Also the directory look (:mod:`.dirents`) on its own."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest

from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery import dirents, watched
from kae_deviceplugin.discovery.dirents import DirEntries
from kae_deviceplugin.discovery.entry_watch import EntryWatch
from kae_deviceplugin.discovery.incremental import IncrementalScanner
from kae_deviceplugin.testing.sysfs_builder import (
    add_device,
    find_uacce_dir,
    remove_dev_node,
    remove_device,
    set_driver_bound,
)
from kae_deviceplugin.testing.sysfs_trees import TREES, vf_of
from tests.discovery.test_incremental import NEVER, TREE, assert_same, kept_per_tick


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    TREES[TREE].build(tmp_path)
    return tmp_path


def ticking(root: Path, verify: bool | None = None) -> IncrementalScanner:
    """A scanner as the daemon runs it without a udev monitor."""
    return IncrementalScanner(root / "sys", root / "dev", NEVER, verify_files=verify)


def settled(scanner: IncrementalScanner) -> Inventory:
    """Tick until the quiet check is built (the tick after a read takes every reading)."""
    scanner.scan()
    return scanner.scan()


@pytest.mark.skipif(dirents._GETDENTS is None, reason="libc without getdents64")
@pytest.mark.parametrize("verify", [False, True], ids=["as-on-sysfs", "off-sysfs"])
def test_a_quiet_tick_looks_only_where_something_can_change(tree: Path, verify: bool) -> None:
    """No uevents: a tick where nothing moved is one getdents64, one inotify read and one pread
    per kept file; no listing, no stat of a /dev node or a driver link, no fstat."""
    with ticking(tree, verify) as scanner:
        first = settled(scanner)
        watch = scanner._set.entries
        assert watch is not None
        with (
            mock.patch.object(dirents, "_GETDENTS", wraps=dirents._GETDENTS) as getdents,
            mock.patch.object(watch, "moved", wraps=watch.moved) as moved,
            mock.patch.object(watched, "_pread", wraps=watched._pread) as preads,
            mock.patch.object(watched, "_exists", wraps=watched._exists) as exists,
            mock.patch.object(watched, "_isdir", wraps=watched._isdir) as isdir,
            mock.patch.object(watched, "_fstat", wraps=watched._fstat) as fstat,
            mock.patch("os.listdir", wraps=os.listdir) as listdir,
            mock.patch("os.scandir", wraps=os.scandir) as scandir,
        ):
            assert scanner.scan() is first
        assert (getdents.call_count, moved.call_count) == (1, 1)
        assert preads.call_count == kept_per_tick(first) == 24
        assert (exists.call_count, isdir.call_count, fstat.call_count) == (0, 0, 0)
        assert (listdir.call_count, scandir.call_count) == (0, 0)


def test_each_change_is_seen_on_the_next_tick(tree: Path) -> None:
    """Without any invalidate(): a /dev node removed, a driver unbound (off sysfs: its
    directory is watched), a device added, a device removed; after each, the next tick answers
    as a full scan and the one after is quiet again (the same object)."""
    pf = next(s for s in TREES[TREE].devices() if s.name == "hisi_hpre-2")
    changes: list[Callable[[], None]] = [
        lambda: remove_dev_node(tree, "hisi_zip-4"),
        lambda: set_driver_bound(tree, "0000:b6:00.0", False),
        lambda: add_device(tree, vf_of(pf, 5, 60)),
        lambda: remove_device(tree, "hisi_sec2-1"),
    ]
    with ticking(tree) as scanner:
        previous = settled(scanner)
        for change in changes:
            change()
            seen = scanner.scan()
            assert seen is not previous
            assert_same(seen, tree)
            previous = settled(scanner)
            assert scanner.scan() is previous
        assert scanner.full_passes == 1
        assert "hisi_hpre-60" in {d.name for d in previous}


def test_on_sysfs_a_device_gone_is_seen_through_the_listing(tree: Path) -> None:
    """As on sysfs (no link-count check, no driver-link watches): a device removed and one
    added are seen on the next tick through the class/uacce look alone."""
    pf = next(s for s in TREES[TREE].devices() if s.name == "hisi_zip-4")
    with ticking(tree, verify=False) as scanner:
        before = settled(scanner)
        add_device(tree, vf_of(pf, 7, 70))
        added = scanner.scan()
        assert "hisi_zip-70" in {d.name for d in added}
        assert_same(added, tree)
        remove_device(tree, "hisi_zip-70")
        assert_same(scanner.scan(), tree)
        assert {d.name for d in scanner.scan()} == {d.name for d in before}


def test_out_of_watches_every_tick_looks_at_each_link(tree: Path) -> None:
    """The kernel refusing the /dev watch: no quiet check without uevents, so every tick looks
    at each /dev node and driver link as before, and still answers as a full scan."""
    with (
        mock.patch.object(EntryWatch, "add", return_value=False),
        ticking(tree) as scanner,
    ):
        settled(scanner)
        assert scanner._quiet is None
        with mock.patch.object(watched, "_isdir", wraps=watched._isdir) as isdir:
            scanner.scan()
        assert isdir.call_count == 18
        remove_dev_node(tree, "hisi_hpre-3")
        assert_same(scanner.scan(), tree)


def test_uevents_withdrawn_make_the_next_tick_a_full_pass(tree: Path) -> None:
    """A monitor that stops working may have lost events, and nothing watched /dev or the driver
    links while it worked: the next tick reads everything and sets the watches up."""
    with ticking(tree) as scanner:
        scanner.uevents_cover_links(True)
        scanner.scan()
        settled(scanner)
        scanner.uevents_cover_links(False)
        assert_same(scanner.scan(), tree)
        assert scanner.full_passes == 2
        quiet = settled(scanner)
        remove_dev_node(tree, "hisi_zip-5")
        gone = scanner.scan()
        assert gone is not quiet
        assert_same(gone, tree)


@pytest.mark.parametrize("with_getdents", [True, False], ids=["getdents64", "listdir"])
def test_dir_entries_tell_any_entry_change(tmp_path: Path, with_getdents: bool) -> None:
    """Unchanged: same; an entry created, removed or renamed: not the same until remembered;
    a directory larger than the first buffer; the directory gone: never the same. With and
    without libc's getdents64 (then a listing is compared)."""
    getdents = dirents._GETDENTS if with_getdents else None
    if with_getdents and getdents is None:
        pytest.skip("libc without getdents64")
    (tmp_path / "a").touch()
    with mock.patch.object(dirents, "_GETDENTS", getdents):
        entries = DirEntries(str(tmp_path))
        try:
            assert (entries.fd >= 0) is with_getdents
            assert entries.same() and entries.same()
            for change in (
                (tmp_path / "b").touch,
                lambda: (tmp_path / "b").rename(tmp_path / "c"),
                (tmp_path / "c").unlink,
            ):
                change()
                assert not entries.same()
                entries.remember()
                assert entries.same()
            for index in range(800):  # about 64 KiB of entries: past the first 32 KiB buffer
                (tmp_path / f"{index:04d}-{'x' * 50}").touch()
            assert not entries.same()
            entries.remember()
            assert entries.same()
            (tmp_path / "0799-last").touch()
            assert not entries.same()
        finally:
            entries.close()
    gone = tmp_path / "gone"
    gone.mkdir()
    with mock.patch.object(dirents, "_GETDENTS", getdents):
        entries = DirEntries(str(gone))
        gone.rmdir()
        assert not entries.same()
        entries.close()


def test_a_device_recreated_between_ticks_is_watched_anew(tree: Path) -> None:
    """Removed and added again under the same name, then one of its files replaced: the new
    directories are watched too (the kernel's watch of the old ones went with them), so the
    replacement is seen on the next tick."""
    spec = next(s for s in TREES[TREE].devices() if s.name == "hisi_hpre-10")
    with ticking(tree) as scanner:
        settled(scanner)
        remove_device(tree, spec.name)
        add_device(tree, spec)
        settled(scanner)
        path = find_uacce_dir(tree, spec.name) / "dev_state"
        path.unlink()
        path.mkdir()  # reading it now fails: the device turns Unhealthy
        seen = scanner.scan()
        assert_same(seen, tree)
        assert {d.name: d for d in seen}[spec.name].reasons != ()


def test_entry_watch_follows_a_directory_recreated_at_its_path(tmp_path: Path) -> None:
    """Adding a path again after its directory was removed and made anew watches the new one."""
    watch = EntryWatch.open()
    assert watch is not None
    directory = tmp_path / "attrs"
    try:
        directory.mkdir()
        assert watch.add(str(directory))
        directory.rmdir()
        directory.mkdir()
        watch.moved()  # the old directory's removal
        assert watch.add(str(directory))
        (directory / "isolate").touch()
        assert watch.moved()
    finally:
        watch.close()


def test_with_watches_the_full_pass_comes_as_rarely_as_with_uevents(tree: Path) -> None:
    """While inotify watches /dev and the driver links, nothing a tick skips can change unseen,
    so the periodic full pass comes every 300 ticks, as with uevents, not every full_every."""
    with IncrementalScanner(tree / "sys", tree / "dev", full_every=3) as scanner:
        for _ in range(12):
            scanner.scan()
        assert scanner.full_passes == 1
    with (
        mock.patch.object(EntryWatch, "open", return_value=None),
        IncrementalScanner(tree / "sys", tree / "dev", full_every=3) as scanner,
    ):
        for _ in range(12):
            scanner.scan()
        assert scanner.full_passes == 4
