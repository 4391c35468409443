"""Discovery for the scan loop: the answer of ``sysfs.scan()`` at a fraction of its cost per tick.

A full scan opens, reads and closes seven attribute files per device and follows its links, every
second. Yet while a device exists only a few of its signals can change: ``isolate``,
``dev_state``, ``available_instances``, its ``/dev`` node and its PCI driver binding; the rest
(``api``, ``flags``, ``algorithms``, ``node_id``, the links, PF/VF) is fixed when the kernel
creates the device. So :class:`IncrementalScanner` reads a device fully once (through the very
code ``scan()`` uses), keeps its three volatile attribute files open, and on later ticks re-reads
only the volatile signals: one ``pread`` per open attribute (sysfs regenerates an attribute on
every read at offset 0), a ``stat`` of the driver link, and whether the device node exists (one
listing of ``/dev`` for all devices when that is cheaper than a ``stat`` each). A device
whose signals did not move is returned as the same object, and a tick where nothing moved returns
the same :class:`Inventory` object, so callers can skip their own work with an ``is`` check.

What is checked when:

* every tick: the ``class/uacce`` listing (devices added and removed), the volatile signals;
* every ``full_every`` ticks, and on the tick after :meth:`IncrementalScanner.invalidate`:
  everything, as ``scan()`` reads it. Static attributes are seen at that cadence: with the
  defaults, within 30 ticks (30 s). A volatile file appearing where it was absent (kernels never
  do that: a device's files are fixed at its creation; fake trees may) is checked for every tick
  off sysfs, and at the full-pass cadence on sysfs.

A kept file that reads ENODEV/ENOENT means its device went away (sysfs detaches open files of a
removed device); on other filesystems, such as the fake trees of the tests, a file replaced or
removed under an open descriptor is noticed by its link count dropping to 0. Either way that
device is re-read fully, so a device re-created under the same name is never mistaken for the
old one. Faulty entries (skipped with a warning) are re-read fully on every tick, as ``scan()``
does.

Descriptors: at most three per device, within a budget that leaves room for the rest of the
daemon and bounds the kernel memory they pin (one page each, see KEPT_BUFFERS_BYTES);
RLIMIT_NOFILE's soft limit is raised toward the hard limit once when the budget is too small, and
past the budget files are opened, read and closed each tick as ``scan()`` does. Running out of
descriptors anyway (EMFILE/ENFILE: the rest of the process needs more) halves the budget and
redoes the tick, since reads made while the process was out of descriptors cannot be trusted.

Threads: :meth:`scan` and :meth:`close` serialise on a lock, so a daemon may close the scanner
while a cancelled ``asyncio.to_thread`` scan is still running; :meth:`invalidate` never blocks.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import threading
from pathlib import Path
from types import TracebackType

from kae_deviceplugin.core.model import Inventory, UacceDevice
from kae_deviceplugin.discovery.attributes import (
    MAX_ATTR_BYTES,
    UNREADABLE,
    Reading,
    decode_attribute,
)
from kae_deviceplugin.discovery.fd_budget import FdBudget, on_sysfs
from kae_deviceplugin.discovery.scan import DeviceReader
from kae_deviceplugin.discovery.watched import WatchedDevice

log = logging.getLogger(__name__)

DEFAULT_FULL_EVERY = 30

# What opening an attribute to keep can give instead of a descriptor.
_ABSENT = -2  # the file did not exist when the device was read: costs nothing per tick
_BY_PATH = -1  # no descriptor to spare, or it could not be opened: read as scan() does

# Read errors on a kept file that mean the file (and so its device) is gone.
_GONE = frozenset({errno.ENODEV, errno.ENOENT, errno.ESTALE})
_OUT_OF_FDS = frozenset({errno.EMFILE, errno.ENFILE})
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
# Ticks redone after running out of descriptors, each with half the fds kept before.
_STARVED_RETRIES = 3
# A stat() of one node costs about as much as listing this many /dev entries (measured).
_DIR_ENTRIES_PER_STAT = 4
# Bound once: the per-tick loop calls these for every device.
_pread, _fstat = os.pread, os.fstat
_exists, _isdir = os.path.exists, os.path.isdir


class IncrementalScanner:
    """``sysfs.scan()`` for a loop: equal answers, most of the work done once per device.

    Static attributes are refreshed every ``full_every`` ticks and after :meth:`invalidate`.
    ``max_fds`` caps the descriptors kept open (default: the soft RLIMIT_NOFILE less
    ``RESERVED_FDS``); ``verify_files`` forces (True) or skips (False) the link-count check
    that notices files replaced under an open descriptor, which by default runs unless the
    tree is on sysfs, where a removed file reads ENODEV instead.
    """

    def __init__(
        self,
        sysfs_root: Path | str,
        dev_root: Path | str,
        full_every: int = DEFAULT_FULL_EVERY,
        *,
        max_fds: int | None = None,
        verify_files: bool | None = None,
    ) -> None:
        if full_every < 1:
            raise ValueError("full_every must be at least 1")
        self.sysfs_root = Path(sysfs_root)
        self.dev_root = Path(dev_root)
        self.full_every = full_every
        self._verify = verify_files  # decided at the first full pass when None
        self._budget = FdBudget(max_fds)
        self._lock = threading.Lock()  # scan() against close(): never close an fd being read
        self._watched: dict[str, WatchedDevice] = {}
        self._reader = DeviceReader(self.sysfs_root, self.dev_root)
        self._until_full = 0
        self._requested = 0
        self._served = 0
        self._last = Inventory()
        self._last_picked: list[UacceDevice] = []
        self._dev_entries = 0  # size of the last /dev listing
        self.full_passes = 0  # ticks that re-read everything
        self.device_reads = 0  # entries read fully, in full passes or one at a time

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> IncrementalScanner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release every descriptor; a later :meth:`scan` starts over with a full pass."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        self._release_all()
        self._until_full = 0

    def invalidate(self) -> None:
        """Make the next tick a full pass (after a udev event or a reload). Any thread."""
        self._requested += 1

    @property
    def kept_fds(self) -> int:
        return self._budget.kept

    # -- one tick ----------------------------------------------------------------------------

    def scan(self) -> Inventory:
        """What ``sysfs.scan(sysfs_root, dev_root)`` returns now (static parts: see the module)."""
        with self._lock:
            inventory = self._tick()
            for _ in range(_STARVED_RETRIES):
                if not self._budget.ran_out:
                    break
                # Reads after the process ran out of descriptors may have failed (and looked like
                # unreadable attributes): give half of ours back and do the whole tick again.
                self._close()
                inventory = self._tick()
            return inventory

    def _tick(self) -> Inventory:
        requested = self._requested
        if self._until_full <= 0 or requested != self._served:
            self._start_full_pass()
            self._served = requested
        else:
            self._reader.warnings = []
        self._until_full -= 1
        reader = self._reader
        names = reader.entries()
        if isinstance(names, Inventory):  # no class/uacce (no KAE here) or it cannot be listed
            self._release_all()
            return self._settle([], names.warnings)
        watched = self._watched
        dev_entries = self._list_dev()
        picked = reader.collect(names, functools.partial(self._device, dev_entries=dev_entries))
        if len(watched) > len(names) or any(name not in watched for name in names):
            listed = set(names)  # some watched names may no longer be listed
            for name in [n for n in watched if n not in listed]:
                self._forget(name)
        return self._settle(picked, tuple(reader.warnings))

    def _device(self, name: str, dev_entries: dict[str, bool] | None) -> UacceDevice | None:
        """One listed entry: from what is kept about it when that still holds, else read anew."""
        state = self._watched.get(name)
        if state is None:
            return self._read(name)
        # A volatile file appearing (kernels never add one; fake trees may) or one gone or
        # replaced under its kept fd: read the device anew.
        appeared = self._verify and any(map(_exists, state.absent))
        device = None if appeared else self._refresh(state, dev_entries)
        if device is None:
            self._forget(name)
            device = self._read(name)
        return device

    def _list_dev(self) -> dict[str, bool] | None:
        """``/dev`` as name -> is a symlink, when one listing is cheaper than a stat per node."""
        watched = len(self._watched)
        if not watched or watched * _DIR_ENTRIES_PER_STAT < self._dev_entries:
            return None
        try:
            with os.scandir(self._reader.dev_root) as listing:
                entries = {entry.name: entry.is_symlink() for entry in listing}
        except OSError:
            return None
        self._dev_entries = len(entries)
        return entries

    def _settle(self, picked: list[UacceDevice], warnings: tuple[str, ...]) -> Inventory:
        """The previous Inventory object when no device object and no warning changed."""
        last, last_picked = self._last, self._last_picked
        if (
            len(picked) == len(last_picked)
            and all(a is b for a, b in zip(picked, last_picked, strict=True))
            and warnings == last.warnings
        ):
            return last
        self._last = self._reader.inventory(picked)
        self._last_picked = picked
        return self._last

    def _start_full_pass(self) -> None:
        self._close()
        self._budget.reset()
        self._reader = DeviceReader(self.sysfs_root, self.dev_root)
        if self._verify is None:
            self._verify = not on_sysfs(self._reader.sysfs_root)
        self._until_full = self.full_every
        self._dev_entries = 0  # measure /dev again: it may have shrunk since the last listing
        self.full_passes += 1

    # -- per device --------------------------------------------------------------------------

    def _read(self, name: str) -> UacceDevice | None:
        """Read one entry fully, exactly as scan() does, and start watching it if it is sound."""
        self.device_reads += 1
        found = self._reader.read_entry(name)
        if found is None:
            return None  # skipped with a warning: read again next tick, as scan() would
        state = WatchedDevice(found, self._reader.dev_root)
        for index, path in enumerate(state.paths):
            fd = self._open(path, present=found.readings[index] is not None)
            if fd >= 0:
                state.kept.append((index, fd))
            elif fd == _BY_PATH:
                state.by_path.append(index)
            elif state.readings[index] is None:
                state.absent.append(path)
            else:
                state.readings[index] = None  # vanished since the read: rebuild next tick
                state.dirty = True
        # With nothing to watch nothing would tell that the device went away: read it each tick.
        if state.kept or state.by_path:
            self._watched[name] = state
        return found.device

    def _open(self, path: str, *, present: bool) -> int:
        budget = self._budget
        if not budget.allows_one_more():
            return _BY_PATH if present else _ABSENT
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return _ABSENT
        except OSError as err:
            if err.errno not in _OUT_OF_FDS:
                return _BY_PATH  # e.g. EACCES: scan() meets it too, so read it as scan() does
            budget.out_of_descriptors()
            log.warning(
                "out of file descriptors with %d sysfs files open: keeping at most %d from now on",
                budget.kept,
                budget.cap,
            )
            return _BY_PATH if present else _ABSENT
        budget.kept += 1
        return fd

    def _refresh(
        self, state: WatchedDevice, dev_entries: dict[str, bool] | None
    ) -> UacceDevice | None:
        """The device with its volatile signals re-read; None when it must be read fully."""
        changed = state.dirty
        raws, readings, verify = state.raws, state.readings, self._verify
        reading: Reading
        for index, fd in state.kept:
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
        if state.by_path:
            by_path = state.reread_by_path()
            if by_path is None:
                return None
            changed = changed or by_path
        if dev_entries is None:
            dev_node_exists = _exists(state.dev_node)
        else:  # as exists() would answer: listed, and if a symlink then not dangling
            is_link = dev_entries.get(state.device.name)
            dev_node_exists = is_link is not None and (not is_link or _exists(state.dev_node))
        driver_bound = _isdir(state.driver)
        if dev_node_exists is not state.dev_node_exists or driver_bound is not state.driver_bound:
            state.dev_node_exists, state.driver_bound = dev_node_exists, driver_bound
            changed = True
        if changed:
            state.rebuild()
        return state.device

    def _forget(self, name: str) -> None:
        state = self._watched.pop(name, None)
        if state is not None:
            self._release(state)

    def _release_all(self) -> None:
        for state in self._watched.values():
            self._release(state)
        self._watched.clear()

    def _release(self, state: WatchedDevice) -> None:
        for _, fd in state.kept:
            os.close(fd)
        self._budget.kept -= len(state.kept)
        state.kept = []
