r"""Discovery for the scan loop: the answer of ``scan()`` at a fraction of its cost per tick.

While a device exists, most of what ``scan()`` reads is fixed (``api``, ``flags``,
``algorithms``, ``node_id``, the links, PF/VF), and of what can change, only ``isolate`` and
``dev_state`` change without a uevent (the kernel computes them when read). So
:class:`IncrementalScanner` reads a device fully once, through :class:`DeviceReader` as
``scan()`` does, keeps its per-tick files open and on later ticks reads only those, one
``pread`` each (see :mod:`.watched`: ``dev_state`` per device, ``isolate`` once per PF, its
reading given to its VFs as ``scan()`` gives it, :func:`~.volatile.isolate_owner`). A tick
where nothing moved returns the same :class:`Inventory` object, so callers can skip their work
with an ``is`` check.

What is read when (docs/performance.md lists each signal's detection latency in each mode):

* every tick: ``dev_state``, ``isolate`` (PFs); while no uevents cover them
  (:meth:`~IncrementalScanner.uevents_cover_links`), also whatever can have changed without one,
  looked at only where it can change: one ``getdents64`` of ``class/uacce`` compared with the
  last (:mod:`.dirents`), one read of an inotify watch of ``/dev`` and, off sysfs, of the PCI
  functions' directories (the driver links; on sysfs an unbind removes the uacce device, which
  the listing and its kept files show). Only when one of them moved are the ``/dev`` nodes and
  driver links of every device looked at;
* on the tick after :meth:`~IncrementalScanner.invalidate` (a uevent, a reload) and every
  ``full_every`` ticks (30; 300 while uevents or inotify watches cover the links): everything,
  as ``scan()`` reads
  it, ``available_instances`` included. That one is not read per tick: its value in the
  inventory is the last full pass's, and the metrics read it when scraped.

A kept file that reads ENODEV means its device went away (sysfs detaches the open files of a
removed device); off sysfs (the fake trees of the tests) a file replaced under its descriptor is
noticed by its link count dropping to 0, which a quiet tick leaves to an inotify watch of the
files' directories (:mod:`.entry_watch`: one read instead of an ``fstat`` per file). Either way
the device is read fully again, so a device re-created under the same name is never mistaken for
the old one. Faulty entries (skipped with a warning) are read fully on every tick, as ``scan()``
does. Descriptors are kept within
:class:`~.fd_budget.FdBudget`; running out anyway (EMFILE/ENFILE) halves the budget and redoes
the tick, since reads made meanwhile cannot be trusted.

Threads: :meth:`scan` and :meth:`close` serialise on a lock, so a daemon may close the scanner
while a cancelled ``asyncio.to_thread`` scan is still running; :meth:`invalidate` never blocks.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import TracebackType

from kae_deviceplugin.core.model import Inventory, UacceDevice
from kae_deviceplugin.discovery.fd_budget import FdBudget, on_sysfs
from kae_deviceplugin.discovery.scan import DeviceReader
from kae_deviceplugin.discovery.watched import DevListing, QuietCheck
from kae_deviceplugin.discovery.watchset import WatchSet

log = logging.getLogger(__name__)

DEFAULT_FULL_EVERY = 30
# While uevents (or, without them, inotify watches of /dev and the driver links) cover what a
# tick stops looking at, the full pass is the safety net for what changes without one (a /dev
# node deleted by hand while uevents cover, a static attribute of a fake tree).
DEFAULT_FULL_EVERY_WITH_UEVENTS = 300
# Ticks redone after running out of descriptors, each with half the fds kept before.
_STARVED_RETRIES = 3


class Cadence:
    """When the next full pass is due: ``every`` ticks after the last one (``long`` ticks while
    uevents or watches cover the links), and on the first tick after a request."""

    def __init__(self, every: int, long: int) -> None:
        self.every, self.long = every, long
        self.until_full = 0  # 0: due (first tick, after close())
        self.requested = 0  # invalidate() calls, from any thread
        self.served = 0  # of those, the ones a full pass began after
        self.covered = False  # the long cadence is in force

    def due(self) -> bool:
        return self.until_full <= 0 or self.requested != self.served

    def cover(self, covered: bool) -> None:
        """Uevents or watches start or stop covering the links."""
        if covered is not self.covered and self.until_full > 0:
            # The next full pass is due as many ticks after the last one as the new cadence
            # says: the first one, made before the udev task started, counted 30, not 300.
            # (At 0 a full pass is due anyway: first tick, after close(), after invalidate().)
            longer = self.long - self.every
            self.until_full += longer if covered else -longer
        self.covered = covered

    def began(self, requested: int, covered: bool) -> None:
        """A full pass begins, serving every request up to ``requested``."""
        self.served = requested
        self.covered = covered
        self.until_full = self.long if covered else self.every


class IncrementalScanner:
    """``sysfs.scan()`` for a loop: equal answers, most of the work done once per device.

    Static attributes are refreshed every ``full_every`` ticks (300 while uevents or watches
    cover the links) and after :meth:`invalidate`. ``max_fds`` caps the descriptors kept open
    (default: the soft RLIMIT_NOFILE less ``RESERVED_FDS``; besides, an inotify descriptor and,
    without uevents, ``class/uacce`` itself); ``verify_files`` forces (True) or skips (False) the
    link-count check that notices files replaced under an open descriptor, which by default runs
    unless the tree is on sysfs, where a removed file reads ENODEV instead.
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
        self._cadence = Cadence(full_every, max(full_every, DEFAULT_FULL_EVERY_WITH_UEVENTS))
        self._verify = verify_files  # decided at the first full pass when None
        self._budget = FdBudget(max_fds)
        self._lock = threading.Lock()  # scan() against close(): never close an fd being read
        self._set = WatchSet(self._budget)
        self._uevents = False  # whether uevents report entries, /dev nodes and driver links
        self._names: list[str] | None = None  # the last class/uacce listing
        self._quiet: QuietCheck | None = None  # the fast check of a tick, while it suffices
        self._reader = DeviceReader(self.sysfs_root, self.dev_root)
        self._last = Inventory()
        self._last_picked: list[UacceDevice] = []
        self._dev = DevListing()
        self.full_passes = 0  # ticks that re-read everything

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
        self._cadence.until_full = 0

    def uevents_cover_links(self, covered: bool) -> None:
        """Whether uevents now report devices added and removed, /dev nodes and driver links
        (the udev task says so once its monitor works, and takes it back if it fails): then
        ticks stop looking at them and rely on :meth:`invalidate` and a rarer full pass."""
        if self._uevents and not covered:  # events lost? and nothing watches /dev, links yet
            self._cadence.requested += 1
        self._uevents = covered
        self._cadence.cover(covered or self._set.links_watched)
        self._quiet = None

    @property
    def links_by_uevents(self) -> bool:
        return self._uevents

    def invalidate(self) -> None:
        """Make the next tick a full pass (after a udev event or a reload). Any thread."""
        self._cadence.requested += 1

    @property
    def kept_fds(self) -> int:
        return self._budget.kept

    @property
    def device_reads(self) -> int:
        """Entries read fully, in full passes or one at a time."""
        return self._set.reads

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

    def quiet_tick(self, max_files: int) -> Inventory | None:
        """The tick :meth:`scan` would make now if it is a quiet check of at most ``max_files``
        files and nothing moved: the same Inventory object; else None, and the next :meth:`scan`
        makes the whole tick. Cheap enough for an event loop (one ``pread`` per file)."""
        if not self._lock.acquire(blocking=False):
            return None  # a scan still runs in a thread: the caller's scan() waits for it
        try:
            quiet = self._quiet
            if self._cadence.due() or quiet is None or len(quiet.fds) > max_files:
                return None
            if not quiet.quiet():
                # Something moved, and the events that said so are read: scan() must not
                # trust the quiet check again before its slow path has looked.
                self._quiet = None
                return None
            self._cadence.until_full -= 1
            return self._last
        finally:
            self._lock.release()

    def _tick(self) -> Inventory:
        cadence = self._cadence
        requested = cadence.requested
        full = cadence.due()
        if not full and self._quiet is not None and self._quiet.quiet():
            cadence.until_full -= 1
            return self._last  # nothing moved (and with uevents, nothing else to look at)
        self._quiet = None
        if full:
            self._start_full_pass(requested)
        else:
            self._reader.warnings = []
        cadence.until_full -= 1
        # With uevents, entries come and go only with an event, which makes the tick a full pass.
        names = self._names if self._uevents and not full else None
        if names is None:
            if not self._uevents:
                self._set.snapshot(self._reader.class_dir)
            listing = self._reader.entries()
            if isinstance(listing, Inventory):  # no class/uacce (no KAE) or it cannot be listed
                self._release_all()
                self._names = None
                return self._settle([], listing.warnings)
            names = self._names = listing
            self._set.forget_unlisted(names)
        picked = self._read_listed(names)
        self._quiet = self._set.quiet_check(names, links=not self._uevents)
        return self._settle(picked, tuple(self._reader.warnings))

    def _read_listed(self, names: list[str]) -> list[UacceDevice]:
        """Every listed entry's device, each from what is kept when that still holds."""
        links = not self._uevents
        reader, watched = self._reader, self._set
        dev_entries = self._dev.listing(reader.dev_root, len(watched.devices)) if links else None
        devices: dict[str, UacceDevice | None] = {}
        watched.unlisted = False
        watched.begin_tick()
        # Owners of an isolate flag first, so that every VF sees its PF's reading of this tick.
        followers = []
        for name in names:
            state = watched.devices.get(name)
            if state is not None and state.follows is not None:
                followers.append(name)
            else:
                devices[name] = watched.answer(reader, name, dev_entries, links)
        for name in followers:
            devices[name] = watched.answer(reader, name, dev_entries, links)
        devices.update(watched.settle_followers())  # VFs read this tick: their PF's isolate
        if watched.unlisted:
            self._names = None  # one was removed, its uevent not handled yet: list again
        return reader.collect(names, devices.__getitem__)

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

    def _start_full_pass(self, requested: int) -> None:
        self._close()
        self._budget.reset()
        self._reader = DeviceReader(self.sysfs_root, self.dev_root)
        if self._verify is None:
            self._verify = not on_sysfs(self._reader.sysfs_root)
        self._set.start(self._verify, None if self._uevents else self._reader.dev_root)
        self._cadence.began(requested, self._uevents or self._set.links_watched)
        self._dev.size = 0  # measure /dev again: it may have shrunk since the last listing
        self.full_passes += 1

    def _release_all(self) -> None:
        self._set.release_all()
        self._quiet = None  # its descriptors are closed
