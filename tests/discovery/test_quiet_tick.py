"""Quiet ticks: off sysfs a quiet tick learns that a kept file was replaced or removed from one
inotify read (the entry watch of the files' directories) instead of an fstat per file, and
without inotify checks link counts as before; ``quiet_tick`` (what the daemon runs on its event
loop) answers only when nothing moved. Either way the answer stays a full scan's."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest

from kae_deviceplugin.discovery import watched
from kae_deviceplugin.discovery.entry_watch import EntryWatch
from kae_deviceplugin.discovery.incremental import IncrementalScanner
from kae_deviceplugin.testing.sysfs_builder import find_uacce_dir, remove_device, set_attribute
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.discovery.test_incremental import NEVER, TREE, assert_same, kept_per_tick


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    TREES[TREE].build(tmp_path)
    return tmp_path


def quiet_scanner(root: Path) -> IncrementalScanner:
    """A scanner as the daemon runs it while its udev monitor works (quiet ticks possible)."""
    scanner = IncrementalScanner(root / "sys", root / "dev", NEVER)
    scanner.uevents_cover_links(True)
    return scanner


def test_entry_watch_reports_renames_creations_and_removals(tmp_path: Path) -> None:
    """Nothing happened: False; a file renamed over another, created, removed: True, once."""
    watch = EntryWatch.open()
    assert watch is not None
    try:
        (tmp_path / "dev_state").write_text("0\n")
        assert watch.add(str(tmp_path)) and watch.add(str(tmp_path))
        assert watch.watched == {str(tmp_path)}
        assert not watch.moved()
        (tmp_path / "new").write_text("1\n")
        os.replace(tmp_path / "new", tmp_path / "dev_state")
        assert watch.moved()
        assert not watch.moved()
        (tmp_path / "dev_state").unlink()
        assert watch.moved()
        with (tmp_path / "dev_state").open("w") as file:
            assert watch.moved()  # created
            file.write("2\n")
        assert not watch.moved(), "writing in place is seen by pread, not here"
    finally:
        watch.close()


def test_a_quiet_tick_reads_the_watch_not_each_link_count(tree: Path) -> None:
    """No fstat on a quiet tick; a PF's isolate renamed over (as the benchmark flips health)
    is seen on the next tick, and so is a device removed."""
    with quiet_scanner(tree) as scanner:
        scanner.scan()
        first = scanner.scan()  # the first tick after a full pass takes every reading
        with mock.patch.object(watched, "_fstat", wraps=watched._fstat) as fstat:
            assert scanner.scan() is first
        assert fstat.call_count == 0
        set_attribute(tree, "hisi_hpre-2", "isolate", "1")
        flipped = scanner.scan()
        assert flipped is not first
        assert_same(flipped, tree)
        assert scanner.scan() is flipped
        remove_device(tree, "hisi_zip-17")
        assert_same(scanner.scan(), tree)


def test_without_inotify_quiet_ticks_check_link_counts(tree: Path) -> None:
    """Where inotify cannot be had, a quiet tick fstats every kept file and still sees a file
    replaced under its descriptor."""
    with (
        mock.patch.object(EntryWatch, "open", return_value=None),
        quiet_scanner(tree) as scanner,
    ):
        scanner.scan()
        first = scanner.scan()  # the first tick after a full pass takes every reading
        with mock.patch.object(watched, "_fstat", wraps=watched._fstat) as fstat:
            assert scanner.scan() is first
        assert fstat.call_count == kept_per_tick(first)
        set_attribute(tree, "hisi_sec2-1", "dev_state", "-1")
        assert_same(scanner.scan(), tree)


def test_out_of_watches_falls_back_to_link_counts(tree: Path) -> None:
    """The kernel refusing a watch (ENOSPC past max_user_watches) closes the watch; ticks check
    link counts from then on and keep the full scan's answer."""
    before = len(os.listdir("/proc/self/fd"))
    with (
        mock.patch.object(EntryWatch, "add", return_value=False),
        quiet_scanner(tree) as scanner,
    ):
        first = scanner.scan()
        assert len(os.listdir("/proc/self/fd")) - before == scanner.kept_fds, "watch closed"
        with mock.patch.object(watched, "_fstat", wraps=watched._fstat) as fstat:
            assert scanner.scan() is first
        assert fstat.call_count == kept_per_tick(first)
        path = find_uacce_dir(tree, "hisi_zip-4") / "dev_state"
        path.unlink()
        path.write_text("-1\n")
        assert_same(scanner.scan(), tree)


def test_quiet_tick_answers_only_when_nothing_moved(tree: Path) -> None:
    """The same object while quiet; None when a file was replaced, and the scan() after it
    still sees the change (the events the quiet check read are not lost); None when the check
    is larger than allowed or a full pass is due, without using anything up."""
    with quiet_scanner(tree) as scanner:
        assert scanner.quiet_tick(512) is None, "no quiet check before the first ticks"
        scanner.scan()
        first = scanner.scan()
        assert scanner.quiet_tick(512) is first
        assert scanner.quiet_tick(kept_per_tick(first) - 1) is None
        set_attribute(tree, "hisi_hpre-2", "isolate", "1")
        assert scanner.quiet_tick(512) is None
        changed = scanner.scan()
        assert changed is not first
        assert_same(changed, tree)
        scanner.scan()
        assert scanner.quiet_tick(512) is not None
        scanner.invalidate()
        assert scanner.quiet_tick(512) is None
        passes = scanner.full_passes
        scanner.scan()
        assert scanner.full_passes == passes + 1


def test_full_pass_cadence_follows_whether_uevents_cover_links(tree: Path) -> None:
    """The daemon's first full pass runs before its udev monitor works: once uevents cover the
    links the next full pass is 300 ticks after it (uevents), not full_every; when
    they stop covering, the shorter cadence is back (here overdue: the next tick is full)."""
    with IncrementalScanner(tree / "sys", tree / "dev", full_every=3) as scanner:
        scanner.scan()
        scanner.uevents_cover_links(True)
        for _ in range(10):
            scanner.scan()
        assert scanner.full_passes == 1
        scanner.uevents_cover_links(False)
        scanner.scan()
        assert scanner.full_passes == 2
