"""The devices the incremental scanner keeps between full reads, and the descriptors they hold.

A :class:`WatchSet` owns every :class:`~.watched.WatchedDevice`, the PFs whose ``isolate`` their
VFs follow, the descriptor budget and the inotify watch (:mod:`.entry_watch`) of the directories
where what a tick would otherwise look at changes: off sysfs the kept files' directories; while
no uevents cover them, ``/dev`` (a devtmpfs, which inotify watches) and, off sysfs, the PCI
functions' directories, where the ``driver`` links are. On sysfs a driver's link needs no
watch: unbinding removes the uacce device the driver made, so its entry leaves ``class/uacce``
and its kept files read ENODEV. :mod:`.incremental` decides when to look; this module answers
one listed entry from what is kept, reads it anew when that no longer holds, and gives every
descriptor back.
"""

from __future__ import annotations

import os

from kae_deviceplugin.core.model import UacceDevice
from kae_deviceplugin.discovery.dirents import DirEntries
from kae_deviceplugin.discovery.entry_watch import EntryWatch
from kae_deviceplugin.discovery.fd_budget import FdBudget
from kae_deviceplugin.discovery.scan import DeviceReader
from kae_deviceplugin.discovery.watched import QuietCheck, WatchedDevice, quiet_check

_exists = os.path.exists


class WatchSet:
    """Watched devices by name, their isolate owners by PCI address, and their descriptors.

    ``verify`` (off sysfs): files replaced under a kept descriptor are looked for, through
    ``entries`` (inotify) while it works, else through link counts. ``links_watched``: while
    no uevents cover them, ``entries`` tells when a ``/dev`` node or (off sysfs) a driver link
    may have moved, so a quiet tick need not look at each.
    """

    def __init__(self, budget: FdBudget) -> None:
        self.budget = budget
        self.verify = False
        self.devices: dict[str, WatchedDevice] = {}
        # PCI address -> an isolate owner read this tick or watched (a VF takes its reading)
        self.owners: dict[str, WatchedDevice] = {}
        self.passing: list[str] = []  # owners read fully but not watched: this tick's only
        self.new_followers: list[WatchedDevice] = []  # VFs read this tick
        self.entries: EntryWatch | None = None
        self.links_watched = False
        self.class_entries: DirEntries | None = None  # without uevents: class/uacce kept open
        self.reads = 0  # entries read fully, in full passes or one at a time
        self.unlisted = False  # an entry listed this tick was gone (the scanner resets it)

    def start(self, verify: bool, dev_root: str | None) -> None:
        """A full pass begins (every descriptor already released); ``dev_root``: watch /dev
        and the driver links, as no uevents cover them."""
        self.verify = verify
        if verify or dev_root is not None:
            self.entries = EntryWatch.open()  # None: link counts, and a look at each link
        self.links_watched = dev_root is not None and self._watch(dev_root)

    def snapshot(self, class_dir: str) -> None:
        """Without uevents, before ``class/uacce`` is listed: what its entries are now, for
        quiet ticks to compare with (a change after this is a difference on the next tick)."""
        if self.class_entries is None:
            self.class_entries = DirEntries(class_dir)
        else:
            self.class_entries.remember()  # the same descriptor: a slow tick opens nothing

    def _watch(self, directory: str) -> bool:
        """Watch ``directory``; out of watches: link counts and per-device looks from now on."""
        entries = self.entries
        if entries is not None and not entries.add(directory):
            entries.close()
            self.entries = None
        return self.entries is not None

    def answer(
        self,
        reader: DeviceReader,
        name: str,
        dev_entries: dict[str, bool] | None,
        links: bool,
    ) -> UacceDevice | None:
        """One listed entry: from what is kept about it when that still holds, else read anew.
        An entry gone from ``class/uacce`` since the listing (removed, its uevent not handled
        yet) is None and sets :attr:`unlisted`."""
        state = self.devices.get(name)
        if state is None:
            return self.read(reader, name)
        # A per-tick file appearing (kernels never add one; fake trees may) or one gone or
        # replaced under its kept fd: read the device anew.
        appeared = self.verify and any(map(_exists, state.absent))
        owner = None
        if state.follows is not None:
            owner = self.owners.get(state.follows)
            if owner is None and not state.own_isolate:  # PF gone or faulty: read its own flag
                state.adopt_isolate(self.budget)
            elif owner is not None and state.own_isolate:
                appeared = True  # its PF is back: read it anew, following the PF again
            if state.own_isolate:
                owner = None
        refresh = state.refresh
        if not appeared and refresh(dev_entries, verify=self.verify, links=links, owner=owner):
            return state.device
        self.forget(name)
        if not links and not os.path.lexists(f"{reader.class_dir}/{name}"):
            self.unlisted = True
            return None
        return self.read(reader, name)

    def read(self, reader: DeviceReader, name: str) -> UacceDevice | None:
        """Read one entry fully, exactly as scan() does, and start watching it if it is sound."""
        self.reads += 1
        found = reader.read_entry(name)
        if found is None:
            return None  # skipped with a warning: read again next tick, as scan() would
        state = WatchedDevice(found, reader.dev_root)
        state.keep(state.tick_indexes(), self.budget)
        if self.verify:
            self._watch(os.path.dirname(state.paths[0]))
            if self.links_watched:
                self.links_watched = self._watch(found.device.pci_path)
        # With nothing to watch nothing would tell that the device went away: read it each tick.
        watched = bool(state.kept or state.by_path)
        if watched:
            self.devices[name] = state
        if state.follows is not None:
            self.new_followers.append(state)
        else:
            self.owners[found.device.pci_address] = state
            if not watched:
                self.passing.append(found.device.pci_address)
        return found.device

    def begin_tick(self) -> None:
        """Forget the owners of the last tick that are not watched (they are read again)."""
        for address in self.passing:
            owner = self.owners.get(address)
            if owner is not None and self.devices.get(owner.device.name) is not owner:
                del self.owners[address]
        self.passing.clear()

    def settle_followers(self) -> dict[str, UacceDevice]:
        """Every VF read this tick takes its PF's isolate reading, as ``scan()`` gives it, or
        (its PF not read: gone, faulty) reads its own flag from now on; the devices that changed
        by it, by name."""
        changed = {}
        for state in self.new_followers:
            owner = self.owners.get(state.follows) if state.follows is not None else None
            if owner is not None:
                before = state.device
                state.follow(owner)
                if state.device is not before:
                    changed[state.device.name] = state.device
            elif self.devices.get(state.device.name) is state:
                state.adopt_isolate(self.budget)
        self.new_followers.clear()
        return changed

    def quiet_check(self, names: list[str], links: bool) -> QuietCheck | None:
        """The fast check of a tick, when every listed entry is watched; ``links``: no uevents
        cover them, so the check also lists ``class/uacce`` and needs ``links_watched``."""
        if len(self.devices) != len(names):  # some entry is read fully every tick
            return None
        if not links:
            return quiet_check(self.devices.values(), self.verify, self.entries)
        if not self.links_watched or self.class_entries is None:
            return None
        return quiet_check(self.devices.values(), self.verify, self.entries, self.class_entries)

    def forget_unlisted(self, names: list[str]) -> None:
        devices = self.devices
        if len(devices) > len(names) or any(name not in devices for name in names):
            listed = set(names)  # some watched names may no longer be listed
            for name in [n for n in devices if n not in listed]:
                self.forget(name)

    def forget(self, name: str) -> None:
        state = self.devices.pop(name, None)
        if state is not None:
            if self.owners.get(state.device.pci_address) is state:
                del self.owners[state.device.pci_address]
            self.release(state)

    def release_all(self) -> None:
        for state in self.devices.values():
            self.release(state)
        self.devices.clear()
        self.owners.clear()
        self.passing.clear()
        self.new_followers.clear()
        if self.entries is not None:
            self.entries.close()
            self.entries = None
        self.links_watched = False
        if self.class_entries is not None:
            self.class_entries.close()
            self.class_entries = None

    def release(self, state: WatchedDevice) -> None:
        for _, fd in state.kept:
            os.close(fd)
        self.budget.kept -= len(state.kept)
        state.kept = []
