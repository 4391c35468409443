"""The incremental scanner answers exactly what a full scan answers, opening nothing when idle.

Run ``python -m tests.test_incremental DIR...`` (trees from ``sysfs_fixtures/generate.py
--large N --out DIR``) to print CPU milliseconds per tick of the full and incremental scans.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kae_deviceplugin.core.health import QUEUES_UNREADABLE
from kae_deviceplugin.core.model import Function, Health, Inventory, UacceDevice
from kae_deviceplugin.discovery import fd_budget, incremental, watched
from kae_deviceplugin.discovery.entry_watch import EntryWatch
from kae_deviceplugin.discovery.fd_budget import on_sysfs
from kae_deviceplugin.discovery.incremental import IncrementalScanner
from kae_deviceplugin.discovery.scan import DeviceReader, scan
from kae_deviceplugin.discovery.volatile import VOLATILE_ATTRIBUTES
from kae_deviceplugin.testing.sysfs_builder import (
    DeviceSpec,
    add_dev_node,
    add_device,
    find_uacce_dir,
    remove_dev_node,
    remove_device,
    set_attribute,
    set_driver_bound,
    vf_address,
)
from kae_deviceplugin.testing.sysfs_trees import TREES, vf_of

REPO = Path(__file__).resolve().parents[2]
TREE = "kunpeng920-2p-vfs"
NEVER = 10**9  # full_every that keeps every tick after the first incremental
# Each example builds a tree: on tmpfs that is ten times faster than on a disk.
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None

values = st.sampled_from(["0", "1", "-1", "256", "0x10", "abc", "", " 7 ", "-0x1", "99999"])
garbage = st.binary(max_size=24)


def lazy_view(inventory: Inventory) -> list[UacceDevice]:
    """The devices without what ticks read lazily: ``available_instances`` is read at full
    passes and when asked for (metrics), not per tick, and so is the reason it gives."""
    shown = []
    for device in inventory:
        reasons = tuple(r for r in device.reasons if r != QUEUES_UNREADABLE)
        health = Health.UNHEALTHY if reasons else Health.HEALTHY
        shown.append(replace(device, available_instances=None, reasons=reasons, health=health))
    return shown


def assert_same(got: Inventory, root: Path) -> None:
    """Equal to a full scan but for the lazily read available_instances."""
    expected = scan(root / "sys", root / "dev")
    assert lazy_view(got) == lazy_view(expected)
    assert got.warnings == expected.warnings


def kept_per_tick(inventory: Inventory) -> int:
    """Files a tick reads: dev_state of every device and isolate of every PF."""
    return sum(2 if d.function is Function.PF else 1 for d in inventory)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class IncrementalMatchesFullScan(RuleBasedStateMachine):
    """Random volatile changes to a 2-socket tree with VFs; compared to scan() after each.

    A VF's own ``isolate`` file changes apart from its PF's (which only a fake tree can do: the
    kernel answers a VF's ``isolate`` with its PF's flag): both scanners give a VF its PF's
    reading while the PF is there, and the VF's own once it is not.
    """

    UEVENTS = False  # whether uevents cover entries, /dev nodes and driver links

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="kaeinc", dir=SCRATCH))
        TREES[TREE].build(self.root)
        self.specs: dict[str, DeviceSpec] = {s.name: s for s in TREES[TREE].devices()}
        self.present = set(self.specs)
        self.removed: set[str] = set()
        self.next_ident = 100
        self.scanner = IncrementalScanner(self.root / "sys", self.root / "dev", full_every=NEVER)
        self.scanner.uevents_cover_links(self.UEVENTS)
        self.scanner.scan()
        self.full_passes = 1
        self.invalidated = False

    def uevent(self) -> None:
        """What the udev task does on an event the change would raise (with uevents on)."""
        if self.UEVENTS:
            self.scanner.invalidate()
            self.invalidated = True

    def tick(self) -> Inventory:
        """One scan, counting the full pass an invalidate() makes it."""
        if self.invalidated:
            self.full_passes += 1
            self.invalidated = False
        return self.scanner.scan()

    def teardown(self) -> None:
        self.scanner.close()
        shutil.rmtree(self.root)

    def attribute(self, name: str, attr: str) -> Path:
        return find_uacce_dir(self.root, name) / attr

    def check(self) -> None:
        """The scanner's answer now equals a full scan's."""
        assert_same(self.tick(), self.root)

    def used_addresses(self) -> set[str]:
        return {self.specs[n].pci_address for n in self.present | self.removed}

    # -- attribute values ------------------------------------------------------------------

    @precondition(lambda self: self.present)
    @rule(data=st.data(), attr=st.sampled_from(VOLATILE_ATTRIBUTES), value=values)
    def replace_value(self, data: st.DataObject, attr: str, value: str) -> None:
        """As the builder writes: a new file renamed over the old one."""
        name = data.draw(st.sampled_from(sorted(self.present)))
        if not self.attribute(name, attr).is_dir():
            set_attribute(self.root, name, attr, value)

    @precondition(lambda self: self.present)
    @rule(data=st.data(), attr=st.sampled_from(VOLATILE_ATTRIBUTES), content=garbage)
    def overwrite_in_place(self, data: st.DataObject, attr: str, content: bytes) -> None:
        """As sysfs changes a value: same file, new content, seen through the kept fd alone."""
        name = data.draw(st.sampled_from(sorted(self.present)))
        path = self.attribute(name, attr)
        if path.is_file():
            with path.open("r+b") as file:
                file.truncate(0)
                file.write(content)
            reads = self.scanner.device_reads
            self.check()
            assert self.scanner.device_reads == reads, "an in-place change needs no full read"

    @precondition(lambda self: self.present)
    @rule(data=st.data(), attr=st.sampled_from(VOLATILE_ATTRIBUTES))
    def make_unreadable(self, data: st.DataObject, attr: str) -> None:
        """A directory where the attribute was: reading it fails (EISDIR)."""
        name = data.draw(st.sampled_from(sorted(self.present)))
        path = self.attribute(name, attr)
        if path.is_file():
            path.unlink()
            path.mkdir()

    @precondition(lambda self: self.present)
    @rule(data=st.data(), attr=st.sampled_from(VOLATILE_ATTRIBUTES), value=values)
    def make_readable(self, data: st.DataObject, attr: str, value: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.present)))
        path = self.attribute(name, attr)
        if path.is_dir():
            path.rmdir()
            path.write_text(value + "\n")

    # -- device node and driver -----------------------------------------------------------

    @precondition(lambda self: self.present)
    @rule(data=st.data(), shape=st.sampled_from(["missing", "node", "dangling", "link"]))
    def set_dev_node(self, data: st.DataObject, shape: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.present)))
        remove_dev_node(self.root, name)
        node = self.root / "dev" / name
        if shape == "node":
            add_dev_node(self.root, name)
        elif shape == "dangling":
            node.symlink_to("nothing-here")
        elif shape == "link":
            (self.root / "dev" / ".target").touch()
            node.symlink_to(".target")
        self.uevent()

    @rule(count=st.sampled_from([0, 40, 120]))
    def clutter_dev(self, count: int) -> None:
        """Unrelated /dev entries: many make the scanner stat nodes rather than list /dev."""
        for stale in (self.root / "dev").glob("tty*"):
            stale.unlink()
        for index in range(count):
            (self.root / "dev" / f"tty{index}").touch()

    @precondition(lambda self: self.present)
    @rule(data=st.data(), bound=st.booleans())
    def bind(self, data: st.DataObject, bound: bool) -> None:
        spec = self.specs[data.draw(st.sampled_from(sorted(self.present)))]
        set_driver_bound(self.root, spec.pci_address, bound, spec.driver)
        self.uevent()

    # -- devices coming and going ---------------------------------------------------------

    @precondition(lambda self: self.present)
    @rule(data=st.data(), whole_function=st.booleans())
    def remove(self, data: st.DataObject, whole_function: bool) -> None:
        name = data.draw(st.sampled_from(sorted(self.present)))
        is_vf = self.specs[name].parent_pf is not None
        remove_device(self.root, name, remove_function=whole_function and is_vf)
        self.present.discard(name)
        self.removed.add(name)
        self.uevent()

    @precondition(lambda self: self.removed)
    @rule(data=st.data())
    def add_back(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.removed)))
        add_device(self.root, self.specs[name])
        self.removed.discard(name)
        self.present.add(name)
        self.uevent()

    @precondition(lambda self: self.present)
    @rule(data=st.data())
    def recreate_between_ticks(self, data: st.DataObject) -> None:
        """Removed and added again under the same name before the scanner looks."""
        name = data.draw(st.sampled_from(sorted(self.present)))
        remove_device(self.root, name)
        add_device(self.root, self.specs[name])
        self.uevent()

    @rule(data=st.data(), index=st.integers(min_value=2, max_value=6))
    def add_vf(self, data: st.DataObject, index: int) -> None:
        pfs = sorted(n for n in self.specs if self.specs[n].parent_pf is None)
        pf = self.specs[data.draw(st.sampled_from(pfs))]
        if vf_address(pf.pci_address, index) in self.used_addresses():
            return
        spec = vf_of(pf, index, self.next_ident)
        self.next_ident += 1
        add_device(self.root, spec)
        self.specs[spec.name] = spec
        self.present.add(spec.name)
        self.uevent()

    # -- after every step -----------------------------------------------------------------

    @invariant()
    def equal_to_full_scan_and_idle_opens_nothing(self) -> None:
        scanner = self.scanner
        current = self.tick()
        assert_same(current, self.root)
        with mock.patch("os.open", wraps=os.open) as opened:
            again = scanner.scan()
        assert opened.call_count == 0, "a tick without change opened files"
        assert again is current, "a tick without change built a new inventory"
        assert scanner.full_passes == self.full_passes
        assert scanner.kept_fds <= 2 * len(current)


class IncrementalWithUeventsMatchesFullScan(IncrementalMatchesFullScan):
    """The same with uevents covering entries, /dev nodes and links: ticks read only per-tick
    files (through the quiet check when nothing moved), each evented change invalidates."""

    UEVENTS = True


MACHINE_SETTINGS = settings(
    max_examples=40,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestIncrementalMatchesFullScan = IncrementalMatchesFullScan.TestCase
TestIncrementalMatchesFullScan.settings = MACHINE_SETTINGS
TestIncrementalWithUeventsMatchesFullScan = IncrementalWithUeventsMatchesFullScan.TestCase
TestIncrementalWithUeventsMatchesFullScan.settings = MACHINE_SETTINGS


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    TREES[TREE].build(tmp_path)
    return tmp_path


def make(root: Path, **options: object) -> IncrementalScanner:
    return IncrementalScanner(root / "sys", root / "dev", **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(TREES))
def test_every_named_tree_matches_on_every_tick(tmp_path: Path, name: str) -> None:
    """Faulty entries, other drivers, old layouts, no class/uacce: the same answer as scan()."""
    TREES[name].build(tmp_path)
    with make(tmp_path, full_every=NEVER) as scanner:
        for _ in range(3):
            assert_same(scanner.scan(), tmp_path)


def test_with_uevents_a_tick_reads_dev_state_and_pf_isolate_only(tree: Path) -> None:
    """While uevents cover them, ticks neither list class/uacce nor look at /dev nodes or
    driver links: one pread per device and one more per PF, nothing else."""
    with make(tree, full_every=NEVER) as scanner:
        scanner.uevents_cover_links(True)
        first = scanner.scan()
        with (
            mock.patch.object(watched, "_pread", wraps=watched._pread) as preads,
            mock.patch.object(watched, "_exists", wraps=watched._exists) as exists,
            mock.patch.object(watched, "_isdir", wraps=watched._isdir) as isdir,
            mock.patch("os.listdir", wraps=os.listdir) as listdir,
            mock.patch("os.scandir", wraps=os.scandir) as scandir,
        ):
            assert scanner.scan() is first
        assert preads.call_count == kept_per_tick(first) == 24
        assert (exists.call_count, isdir.call_count) == (0, 0)
        assert (listdir.call_count, scandir.call_count) == (0, 0)


def test_with_uevents_links_and_entries_follow_the_event(tree: Path) -> None:
    """A /dev node removed, a driver unbound, a device added: seen on the tick after the
    uevent's invalidate(); a device removed is dropped at once, without a warning."""
    with make(tree, full_every=NEVER) as scanner:
        scanner.uevents_cover_links(True)
        before = scanner.scan()
        remove_dev_node(tree, "hisi_zip-4")
        set_driver_bound(tree, "0000:b6:00.0", False)
        assert scanner.scan() is before, "no uevent yet: nothing looked at"
        scanner.invalidate()
        assert_same(scanner.scan(), tree)
        pf = next(s for s in TREES[TREE].devices() if s.name == "hisi_hpre-2")
        add_device(tree, vf_of(pf, 5, 60))
        assert "hisi_hpre-60" not in {d.name for d in scanner.scan()}
        scanner.invalidate()
        assert "hisi_hpre-60" in {d.name for d in scanner.scan()}
        remove_device(tree, "hisi_hpre-60")
        gone = scanner.scan()
        assert "hisi_hpre-60" not in {d.name for d in gone}
        assert gone.warnings == ()
        assert_same(gone, tree)


def test_static_attribute_change_is_seen_after_invalidate(tree: Path) -> None:
    """algorithms/api are not re-read per tick, but invalidate() makes the next tick read all."""
    with make(tree, full_every=NEVER) as scanner:
        before = scanner.scan()
        set_attribute(tree, "hisi_zip-4", "algorithms", "lz4\nzstd")
        set_attribute(tree, "hisi_zip-4", "api", "hisi_qm_v9")
        stale = {d.name: d for d in scanner.scan()}["hisi_zip-4"]
        assert stale == {d.name: d for d in before}["hisi_zip-4"]
        scanner.invalidate()
        fresh = scanner.scan()
        assert_same(fresh, tree)
        zip4 = {d.name: d for d in fresh}["hisi_zip-4"]
        assert (zip4.algorithms, zip4.api) == (("lz4", "zstd"), "hisi_qm_v9")
        assert scanner.full_passes == 2


def test_static_attributes_refresh_every_full_every_ticks(tree: Path) -> None:
    """With full_every=3 a static change shows within three ticks, and ticks 2-3 read nothing,
    where neither uevents nor inotify watches cover the links (with watches: see
    test_every_tick.py)."""
    with (
        mock.patch.object(EntryWatch, "open", return_value=None),
        make(tree, full_every=3) as scanner,
    ):
        scanner.scan()
        set_attribute(tree, "hisi_sec2-0", "flags", "7")
        seen = []
        for _ in range(3):
            seen.append({d.name: d.flags for d in scanner.scan()}["hisi_sec2-0"])
        assert seen == [129, 129, 7]
        assert scanner.full_passes == 2


def test_device_gone_under_kept_fd_is_read_again(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENODEV from a kept file (sysfs after the device was removed) means: read it fully again."""
    with make(tree, full_every=NEVER, verify_files=False) as scanner:
        scanner.scan()
        target = os.path.realpath(find_uacce_dir(tree, "hisi_hpre-2") / "isolate")
        gone = {fd for fd in map(int, os.listdir("/proc/self/fd")) if _fd_path(fd) == target}
        real_pread = watched._pread

        def pread(fd: int, size: int, offset: int) -> bytes:
            if fd in gone:
                gone.discard(fd)  # once: the number may be reused by the fresh read
                raise OSError(errno.ENODEV, "No such device")
            return real_pread(fd, size, offset)

        monkeypatch.setattr(watched, "_pread", pread)
        set_attribute(tree, "hisi_hpre-2", "isolate", "1")  # rename: the old fd would say 0
        # (its VFs' files too, as the kernel has one flag per PF; they read the PF's fd)
        reads = scanner.device_reads
        kept = scanner.kept_fds
        assert_same(scanner.scan(), tree)
        assert not gone, "the kept isolate file was not read"
        assert scanner.device_reads == reads + 1
        assert scanner.kept_fds == kept


def test_sysfs_mode_sees_in_place_changes_through_kept_fds(tree: Path) -> None:
    """Without the link-count check (as on sysfs) values still follow, one pread per file."""
    with make(tree, full_every=NEVER, verify_files=False) as scanner:
        scanner.scan()
        path = find_uacce_dir(tree, "hisi_sec2-1") / "dev_state"
        path.write_text("-1\n")  # truncate and write: the same inode, as sysfs keeps it
        with mock.patch("os.fstat", wraps=os.fstat) as fstat:
            changed = {d.name: d for d in scanner.scan()}["hisi_sec2-1"]
        assert fstat.call_count == 0
        assert changed.reasons == ("engine-stopped",)
        assert_same(scanner.scan(), tree)


def test_close_releases_every_fd_and_scan_starts_over(tree: Path) -> None:
    """A tick's files stay open (two per PF, one per VF, the inotify descriptor watching their
    directories and /dev, and, without uevents, class/uacce for its one getdents a tick); none
    after close(); a later scan re-reads everything."""
    before = open_fds()
    scanner = make(tree, full_every=NEVER)
    with scanner:
        found = scanner.scan()
        assert len(found) == 18
        assert scanner.kept_fds == kept_per_tick(found) == 6 * 2 + 12
        assert open_fds() - before == 24 + 2
    assert open_fds() == before
    assert scanner.kept_fds == 0
    assert_same(scanner.scan(), tree)
    assert scanner.full_passes == 2
    scanner.close()


def test_small_fd_budget_falls_back_to_reading_by_path(tree: Path) -> None:
    """Past its budget the scanner opens, reads and closes like scan(): still the same answer.
    (Two more descriptors are open: the inotify watch and, without uevents, class/uacce.)"""
    before = open_fds()
    with make(tree, full_every=NEVER, max_fds=5) as scanner:
        scanner.scan()
        assert scanner.kept_fds == 5
        assert open_fds() - before == 5 + 2
        set_attribute(tree, "hisi_zip-17", "available_instances", "0")
        remove_dev_node(tree, "hisi_hpre-3")
        set_driver_bound(tree, "0000:b6:00.0", False)
        assert_same(scanner.scan(), tree)
        remove_device(tree, "hisi_zip-17")
        assert_same(scanner.scan(), tree)
        assert scanner.kept_fds <= 5


def test_kernel_buffer_budget_caps_kept_files(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each kept sysfs file pins a page in the kernel: the default budget bounds their number."""
    monkeypatch.setattr(fd_budget, "KEPT_BUFFERS_BYTES", 10 * os.sysconf("SC_PAGE_SIZE"))
    with make(tree, full_every=NEVER) as scanner:
        assert_same(scanner.scan(), tree)
        assert scanner.kept_fds == 10
        soft_before = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert_same(scanner.scan(), tree)
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == soft_before


def run_limited(soft: int, hard: int, max_fds: int | None, others: int = 0) -> dict[str, int]:
    """Run a scanner in a child whose RLIMIT_NOFILE is (soft, hard), ``others`` fds in use."""
    code = textwrap.dedent(
        f"""
        import json, os, resource, tempfile
        from pathlib import Path
        from kae_deviceplugin.discovery.incremental import IncrementalScanner
        from kae_deviceplugin.discovery.scan import scan
        from kae_deviceplugin.testing.sysfs_builder import set_attribute, remove_dev_node
        from kae_deviceplugin.testing.sysfs_trees import TREES

        root = Path(tempfile.mkdtemp())
        TREES[{TREE!r}].build(root)
        resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))
        in_use = len(os.listdir("/proc/self/fd"))
        others = [os.open("/dev/null", os.O_RDONLY) for _ in range({others} - in_use)]
        equal = True
        with IncrementalScanner(root / "sys", root / "dev", 10**9, max_fds={max_fds}) as inc:
            for step in range(4):
                got, want = inc.scan(), scan(root / "sys", root / "dev")
                equal = equal and got == want and got.warnings == want.warnings
                # The kernel's one isolate flag per PF, which its VFs' files read as well.
                pf = {{d.name: d for d in want}}["hisi_sec2-{{}}".format(step % 2)]
                for d in want:
                    if d.pf_address == pf.pci_address:
                        set_attribute(root, d.name, "isolate", str(step % 2))
                remove_dev_node(root, "hisi_zip-{{}}".format(step + 6))
            kept = inc.kept_fds
            spare = []
            try:
                while len(spare) < 8:
                    spare.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                pass
            for fd in spare:
                os.close(fd)
        print(json.dumps(dict(
            equal=int(equal), kept=kept, soft=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            spare=len(spare),
        )))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_out_of_descriptors_gives_half_back_and_keeps_answering() -> None:
    """EMFILE (the rest of the process holds more than the reserve): same answers, room left."""
    result = run_limited(soft=320, hard=320, max_fds=None, others=300)
    assert result["equal"] == 1
    assert 0 < result["kept"] < 20
    assert result["spare"] == 8


def test_default_budget_stays_below_a_low_limit() -> None:
    """With the hard limit at 64 the reserve leaves no fd to keep: everything read by path."""
    result = run_limited(soft=64, hard=64, max_fds=None)
    assert (result["equal"], result["kept"], result["soft"], result["spare"]) == (1, 0, 64, 8)


def test_soft_limit_is_raised_toward_the_hard_limit_once() -> None:
    """A soft limit below what is needed is raised (here to the hard limit) and fds are kept."""
    result = run_limited(soft=64, hard=4096, max_fds=None)
    assert result["equal"] == 1
    assert result["soft"] == 4096
    assert result["kept"] == 24  # 6 PFs x (isolate, dev_state) + 12 VFs x dev_state


def test_sysfs_is_told_apart_from_other_filesystems(tmp_path: Path) -> None:
    """Only sysfs skips the link-count check; a fake tree on tmpfs or ext4 keeps it."""
    assert not on_sysfs(str(tmp_path))
    if not os.path.isdir("/sys/class") or not _mounted_as("/sys", "sysfs"):
        pytest.skip("/sys is not a sysfs mount here")
    assert on_sysfs("/sys/class")


def test_sysfs_regenerates_a_kept_attribute_on_pread_at_zero() -> None:
    """The kernel behaviour the design rests on: a kept sysfs file shows the new value."""
    path = "/sys/class/net/lo/statistics/rx_packets"
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist here")
    fd = os.open(path, os.O_RDONLY)
    try:
        first = int(os.pread(fd, 4096, 0))
        deadline = time.monotonic() + 5
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            while int(os.pread(fd, 4096, 0)) == first and time.monotonic() < deadline:
                sock.sendto(b"x", ("127.0.0.1", 9))
        assert int(os.pread(fd, 4096, 0)) > first
    finally:
        os.close(fd)


def test_invalidate_from_another_thread_is_not_lost(tree: Path) -> None:
    """invalidate() while a tick runs still makes a later tick a full pass."""
    with make(tree, full_every=NEVER) as scanner:
        scanner.scan()
        watch_set = scanner._set
        original = watch_set.read

        def read_and_invalidate(reader: DeviceReader, name: str) -> UacceDevice | None:
            scanner.invalidate()
            return original(reader, name)

        set_attribute(tree, "hisi_sec2-0", "isolate", "1")  # makes that device be read again
        with mock.patch.object(watch_set, "read", read_and_invalidate):
            scanner.scan()
        passes = scanner.full_passes
        scanner.scan()
        assert scanner.full_passes == passes + 1


def test_close_waits_for_a_scan_running_in_another_thread(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon closing at shutdown never pulls fds from under a to_thread scan still running."""
    with make(tree, full_every=NEVER) as scanner:
        scanner.scan()
        in_pread, go = threading.Event(), threading.Event()
        real_pread = watched._pread

        def paused_pread(fd: int, size: int, offset: int) -> bytes:
            if not in_pread.is_set():
                in_pread.set()
                assert go.wait(10)
            return real_pread(fd, size, offset)

        monkeypatch.setattr(watched, "_pread", paused_pread)
        results: list[Inventory] = []
        scanning = threading.Thread(target=lambda: results.append(scanner.scan()))
        scanning.start()
        assert in_pread.wait(10)
        closing = threading.Thread(target=scanner.close)
        closing.start()
        closing.join(timeout=0.2)  # bounded wait for what must not happen: close finishing
        blocked = closing.is_alive()
        go.set()
        scanning.join(10)
        closing.join(10)
        assert blocked, "close() did not wait for the running scan"
        assert_same(results[0], tree)
        assert scanner.kept_fds == 0


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _mounted_as(point: str, fstype: str) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        for line in mounts:
            fields, _, rest = line.partition(" - ")
            if fields.split()[4] == point and rest.split()[0] == fstype:
                return True
    return False


# -- measurement (not a test: run as a module) ---------------------------------------------------


def _cpu_ms(action: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        for _ in range(repeat):
            action()
        best = min(best, (time.process_time() - started) / repeat)
    return best * 1000


def measure(root: Path, ticks: int = 20) -> dict[str, float]:
    """CPU ms per tick of a full scan and of incremental ticks on ``root``; printed and returned.

    ``per_second_ms`` is the cost per tick at the default cadence (a full pass every
    ``DEFAULT_FULL_EVERY`` ticks), i.e. per second at the default 1 s interval.
    """
    sysfs, dev = root / "sys", root / "dev"
    full = _cpu_ms(lambda: scan(sysfs, dev), max(1, ticks // 10))
    figures = {"devices": float(len(scan(sysfs, dev))), "full_ms": full}
    for label, verify in (("tmpfs_ms", None), ("sysfs_mode_ms", False)):
        with IncrementalScanner(sysfs, dev, NEVER, verify_files=verify) as scanner:
            scanner.scan()
            figures[label] = _cpu_ms(scanner.scan, ticks)
            figures["kept_fds"] = float(scanner.kept_fds)
    victim = next(iter(scan(sysfs, dev))).sysfs_path + "/isolate"
    with IncrementalScanner(sysfs, dev, NEVER) as scanner:
        scanner.scan()
        flip = iter(range(10**9))

        def changed_tick() -> None:
            Path(victim).write_text(f"{next(flip) % 2}\n")
            scanner.scan()

        figures["one_change_ms"] = _cpu_ms(changed_tick, ticks)
    every = incremental.DEFAULT_FULL_EVERY
    figures["per_second_ms"] = (figures["tmpfs_ms"] * (every - 1) + full) / every
    figures["per_second_sysfs_mode_ms"] = (figures["sysfs_mode_ms"] * (every - 1) + full) / every
    print(root, " ".join(f"{key}={value:.2f}" for key, value in figures.items()))
    return figures


def test_measure_runs(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The measurement helper runs on a small tree and prints its figures (no timing asserted)."""
    figures = measure(tree, ticks=2)
    assert figures["devices"] == 18
    assert figures["kept_fds"] == 24
    assert "full_ms=" in capsys.readouterr().out


def test_volatile_file_appearing_on_an_old_layout_is_seen_next_tick(tmp_path: Path) -> None:
    """A mainline-5.10 tree has no isolate file; one written later counts on the next tick."""
    from kae_deviceplugin.discovery.scan import scan
    from kae_deviceplugin.testing.sysfs_builder import set_attribute
    from kae_deviceplugin.testing.sysfs_trees import TREES as NAMED

    NAMED["mainline-5.10"].build(tmp_path)
    with IncrementalScanner(tmp_path / "sys", tmp_path / "dev", full_every=10**6) as scanner:
        assert all(d.healthy for d in scanner.scan())
        set_attribute(tmp_path, "hisi_sec2-0", "isolate", "1")
        ticked = scanner.scan()
        assert ticked == scan(tmp_path / "sys", tmp_path / "dev")
        assert {d.name: d.reasons for d in ticked}["hisi_sec2-0"] == ("isolated",)


if __name__ == "__main__":
    soft_limit, hard_limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"RLIMIT_NOFILE {soft_limit}/{hard_limit}")
    for argument in sys.argv[1:]:
        measure(Path(argument), ticks=20)
    if len(sys.argv) < 2:
        print(__doc__)
