"""What the incremental scanner keeps about one device between full reads, and its per-tick read.

Per tick a device re-reads only what can change without a uevent (the kernel computes ``isolate``
and ``dev_state`` when read and changes them without any notification): its ``dev_state``, and
its ``isolate`` if it owns one. A VF does not: the kernel answers a VF's ``isolate`` with its
PF's flag (``hisi_qm_get_isolate_state``), so a VF takes the reading of its PF's watched state,
one read per PF for all its VFs, by the rule ``scan()`` follows too
(:func:`~.volatile.isolate_owner`); only while its PF is not read does it read its own.
``available_instances`` is not read per tick at all (see ``read_available_instances`` for when
it is). The ``/dev`` node and the driver link are checked per tick only while no uevents cover
them (``links``).
"""

from __future__ import annotations

import dataclasses
import errno
import operator
import os
from collections.abc import Collection, Iterable
from itertools import repeat

from kae_deviceplugin.discovery.attributes import (
    MAX_ATTR_BYTES,
    UNREADABLE,
    Reading,
    decode_attribute,
    read_attribute,
)
from kae_deviceplugin.discovery.dirents import DirEntries
from kae_deviceplugin.discovery.entry_watch import EntryWatch
from kae_deviceplugin.discovery.fd_budget import BY_PATH, FdBudget
from kae_deviceplugin.discovery.volatile import (
    VOLATILE_ATTRIBUTES,
    DeviceRead,
    isolate_owner,
    volatile_fields,
)

ISOLATE, DEV_STATE, AVAILABLE = range(len(VOLATILE_ATTRIBUTES))
# Read errors on a kept file that mean the file (and so its device) is gone.
_GONE = frozenset({errno.ENODEV, errno.ENOENT, errno.ESTALE})
# Bound once: the per-tick loop calls these for every device.
_pread, _fstat = os.pread, os.fstat
_nlink = operator.attrgetter("st_nlink")
_exists, _isdir = os.path.exists, os.path.isdir


class WatchedDevice:
    """One device between full reads: its kept files and the signals its object was built from."""

    __slots__ = (
        "absent",
        "by_path",
        "dev_node",
        "dev_node_exists",
        "device",
        "device_link_ok",
        "dirty",
        "driver",
        "driver_bound",
        "follows",
        "kept",
        "own_isolate",
        "paths",
        "raws",
        "readings",
    )

    def __init__(self, found: DeviceRead, dev_root: str) -> None:
        self.device = found.device
        self.device_link_ok = found.device_link_ok
        self.paths = [f"{found.attribute_dir}/{name}" for name in VOLATILE_ATTRIBUTES]
        self.kept: list[tuple[int, int]] = []  # (index in VOLATILE_ATTRIBUTES, open fd)
        self.by_path: list[int] = []  # indexes read by path each tick; absent ones are in neither
        self.raws: list[bytes | None] = [None] * len(VOLATILE_ATTRIBUTES)  # None: not compared
        self.readings: list[Reading] = list(found.readings)
        self.dev_node = f"{dev_root}/{found.device.name}"
        self.dev_node_exists = found.device.dev_node_exists
        self.driver = f"{found.device.pci_path}/driver"
        self.driver_bound = found.driver_bound
        self.dirty = False  # the device object lags behind ``readings``
        # The PF whose isolate flag this VF's isolate reads (None: it reads its own), and
        # whether it reads its own meanwhile, as that PF is not read (gone, faulty).
        self.follows = isolate_owner(found.device)
        self.own_isolate = False
        # Per-tick files the device lacked when it was read (kernels never add one later).
        self.absent = [self.paths[i] for i in self.wanted() if self.readings[i] is None]

    def wanted(self) -> tuple[int, ...]:
        return (DEV_STATE,) if self.follows and not self.own_isolate else (ISOLATE, DEV_STATE)

    def keep(self, indexes: tuple[int, ...], budget: FdBudget) -> None:
        """Open the files of ``indexes`` to read each tick, or note how else they are read."""
        for index in indexes:
            path = self.paths[index]
            fd = budget.open(path, present=self.readings[index] is not None)
            if fd >= 0:
                self.kept.append((index, fd))
            elif fd == BY_PATH:
                self.by_path.append(index)
            elif self.readings[index] is None:
                if path not in self.absent:
                    self.absent.append(path)
            else:
                self.readings[index] = None  # vanished since the read: rebuild next tick
                self.dirty = True

    def adopt_isolate(self, budget: FdBudget) -> None:
        """Its PF is not read (gone, faulty): read this VF's own isolate until it is again."""
        self.keep((ISOLATE,), budget)
        self.own_isolate = True

    def follow(self, owner: WatchedDevice) -> None:
        """Take the isolate reading of its PF's state, read in the same tick."""
        if owner.readings[ISOLATE] != self.readings[ISOLATE]:
            self.readings[ISOLATE] = owner.readings[ISOLATE]
            self.rebuild()

    def tick_indexes(self) -> tuple[int, ...]:
        """The attributes read each tick; a device with neither keeps available_instances, or
        nothing would tell that it went away."""
        present = tuple(i for i in self.wanted() if self.readings[i] is not None)
        return present or (AVAILABLE,)

    def refresh(
        self,
        dev_entries: dict[str, bool] | None,
        *,
        verify: bool,
        links: bool,
        owner: WatchedDevice | None,
    ) -> bool:
        """Re-read the per-tick signals into a new device object if one moved; False when the
        device must be read fully (a file gone or replaced, or one that was there is absent)."""
        kept = self.read_kept(verify)
        if kept is None:
            return False
        changed = self.dirty or kept
        readings = self.readings
        for index in self.by_path:
            reading = read_attribute(self.paths[index])
            if reading is None:
                return False  # it was there when the device was read
            if reading != readings[index]:
                readings[index], changed = reading, True
        if owner is not None:
            isolate = owner.readings[ISOLATE]
            if isolate != readings[ISOLATE]:
                readings[ISOLATE], changed = isolate, True
        if links and self.links_moved(dev_entries):
            return False  # rare: read it in full, so a rebind also re-reads the driver version
        if changed:
            self.rebuild()
        return True

    def read_kept(self, verify: bool) -> bool | None:
        """One ``pread`` per kept file (sysfs regenerates a file read at offset 0): whether a
        reading moved, None when a file is gone or (``verify``, not on sysfs) replaced."""
        changed = False
        raws, readings = self.raws, self.readings
        for index, fd in self.kept:
            raw: bytes | None
            try:
                raw = _pread(fd, MAX_ATTR_BYTES, 0)
            except OSError as err:
                if err.errno in _GONE:
                    return None
                raw = None
            if verify and _fstat(fd).st_nlink == 0:
                return None  # replaced or removed under the open fd (not on sysfs)
            if raw is not None and raw == raws[index]:
                continue
            raws[index] = raw
            reading = UNREADABLE if raw is None else decode_attribute(raw)
            if reading != readings[index]:
                readings[index] = reading
                changed = True
        return changed

    def links_moved(self, dev_entries: dict[str, bool] | None) -> bool:
        """Look at the ``/dev`` node and the driver link again; whether either moved."""
        if dev_entries is None:
            dev_node_exists = _exists(self.dev_node)
        else:  # as exists() would answer: listed, and if a symlink then not dangling
            is_link = dev_entries.get(self.device.name)
            dev_node_exists = is_link is not None and (not is_link or _exists(self.dev_node))
        driver_bound = _isdir(self.driver)
        if dev_node_exists is self.dev_node_exists and driver_bound is self.driver_bound:
            return False
        self.dev_node_exists, self.driver_bound = dev_node_exists, driver_bound
        return True

    def rebuild(self) -> None:
        """A new device object for the current signals; static fields carried over."""
        readings = self.readings
        volatile = volatile_fields(
            (readings[ISOLATE], readings[DEV_STATE], readings[AVAILABLE]),
            dev_node_exists=self.dev_node_exists,
            driver_bound=self.driver_bound,
            device_link_ok=self.device_link_ok,
        )
        self.device = dataclasses.replace(
            self.device,
            available_instances=volatile.available_instances,
            isolate=volatile.isolate,
            dev_state=volatile.dev_state,
            dev_node_exists=volatile.dev_node_exists,
            health=volatile.health,
            reasons=volatile.reasons,
        )
        self.dirty = False


class DevListing:
    """``/dev`` as name -> is a symlink, when one listing is cheaper than a stat per node."""

    # A stat() of one node costs about as much as listing this many /dev entries (measured).
    ENTRIES_PER_STAT = 4

    def __init__(self) -> None:
        self.size = 0  # entries in the last listing; 0: list again to find out

    def listing(self, dev_root: str, watched: int) -> dict[str, bool] | None:
        if not watched or watched * self.ENTRIES_PER_STAT < self.size:
            return None
        try:
            with os.scandir(dev_root) as entries:
                found = {entry.name: entry.is_symlink() for entry in entries}
        except OSError:
            return None
        self.size = len(found)
        return found


class QuietCheck:
    """A whole tick as C-level loops, for the usual tick where nothing moved: every kept file
    read with ``pread`` and compared, as bytes, with what it read last; one read of ``entries``
    (an inotify watch: off sysfs of the kept files' directories, whether any was replaced or
    removed; without uevents, of ``/dev`` and the driver links' directories), off sysfs without
    it each file's link count; without uevents, one ``getdents64`` of ``class/uacce`` compared
    with the last (``listing``, see :mod:`.dirents`). Any difference, event
    or error sends the tick down the slow path, which reads each device as
    :meth:`WatchedDevice.refresh` does (link counts included) and finds out what moved.
    """

    def __init__(
        self,
        states: Iterable[WatchedDevice],
        verify: bool,
        entries: EntryWatch | None,
        listing: DirEntries | None = None,
    ) -> None:
        kept = [(state, index, fd) for state in states for index, fd in state.kept]
        self.fds = [fd for _, _, fd in kept]
        self.expected = [state.raws[index] for state, index, _ in kept]
        # One byte more than each file held last: enough to tell any change (a longer value
        # reads as a different prefix), and small reads spare a 64 KiB buffer per pread.
        self.sizes = [len(raw or b"") + 1 for raw in self.expected]
        self.verify = verify
        self.entries = entries
        self.listing = listing

    def quiet(self) -> bool:
        try:
            # Events first: whatever is replaced after this read is an event for the next tick.
            if self.entries is not None and self.entries.moved():
                return False
            if self.listing is not None and not self.listing.same():
                return False  # an entry came or went
            raws = list(map(_pread, self.fds, self.sizes, repeat(0)))
            if self.entries is None and self.verify and 0 in map(_nlink, map(_fstat, self.fds)):
                return False
        except OSError:
            return False
        return raws == self.expected


def quiet_check(
    states: Collection[WatchedDevice],
    verify: bool,
    entries: EntryWatch | None = None,
    listing: DirEntries | None = None,
) -> QuietCheck | None:
    """A QuietCheck when a pread of each kept file is all a tick needs to look at, else None:
    every file read by fd (none by path; off sysfs, none that could appear unless ``entries``
    watches their directories), every reading taken by the last tick (none pending), every VF's
    PF watched (or its own isolate kept while it is not)."""
    for state in states:
        if state.by_path or state.dirty or (verify and state.absent and entries is None):
            return None
        if any(state.raws[index] is None for index, _ in state.kept):
            return None
    return QuietCheck(states, verify, entries, listing)
