"""Discovery: ``scan(sysfs_root, dev_root) -> Inventory``, tolerant of every kernel layout.

Rules for input it cannot make sense of (documented in the README, pinned by tests):

* no ``class/uacce`` directory: no KAE on this node, an empty inventory;
* an entry whose name is not ``<kae driver>-<id>``: another uacce driver, ignored (debug log);
* a KAE entry that does not resolve to a directory inside the sysfs root (dangling link, link
  loop, stray regular file), or whose PCI function cannot be named: skipped, with a warning naming
  the path, because there is no stable ID to report it under;
* a second entry on a PCI function already seen: skipped with a warning (the PCI address is the
  key);
* anything else odd about a device that could be named (unreadable or garbage attributes, missing
  ``/dev`` node, unbound driver, broken ``device`` link): reported, Unhealthy with reasons.

The device node is only ever stat()ed: opening it would take a hardware queue.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

from kae_deviceplugin.core.engines import Engine, engine_for_uacce_name
from kae_deviceplugin.core.model import Function, Inventory, UacceDevice
from kae_deviceplugin.discovery.attributes import (
    PCI_ADDRESS,
    AttributeReader,
    Reading,
    inside,
    parse_int,
    read_attribute,
    resolve_dir,
    sva_of,
    text,
)
from kae_deviceplugin.discovery.volatile import (
    DeviceRead,
    VolatileReadings,
    follow_pf_isolate,
    volatile_fields,
)
from kae_deviceplugin.errors import ScanDeferred

log = logging.getLogger(__name__)


class DeviceReader:
    """Reads ``class/uacce`` under one sysfs root: the per-device step and the assembly.

    ``scan()`` is one :meth:`pass_over` its entries; the incremental scanner lists the entries,
    answers most of them from what it kept and calls :meth:`read_entry` for the rest, and both
    go through :meth:`collect` and :meth:`inventory`, so the two answers are built alike.
    """

    def __init__(self, sysfs_root: Path, dev_root: Path) -> None:
        self.sysfs_root = str(sysfs_root.resolve())
        self.dev_root = str(dev_root)
        self.class_dir = f"{self.sysfs_root}/class/uacce"
        self.warnings: list[str] = []
        # driver dir -> whether it is one, its name, its module's version
        self.drivers: dict[str, tuple[bool, str, str | None]] = {}

    def warn(self, message: str) -> None:
        # A value, not a log line: a broken entry is met on every tick, and the daemon logs
        # each warning once when it appears and once when it clears (observability/events.py).
        self.warnings.append(message)
        log.debug("%s", message)

    def entries(self) -> list[str] | Inventory:
        """The sorted names in ``class/uacce``, or the whole answer when it cannot be listed."""
        self.drivers.clear()  # a new listing: modules may have been reloaded since the last one
        try:
            return sorted(os.listdir(self.class_dir))
        except FileNotFoundError:
            log.debug("%s does not exist: no UACCE devices on this node", self.class_dir)
            return Inventory()
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE):
                # Our process is out of descriptors: an empty answer would "remove" every device
                # and flap the node's capacity. The node has not changed; look again later.
                raise ScanDeferred(f"cannot list {self.class_dir} now: {err.strerror}") from None
            self.warn(f"cannot list {self.class_dir}: {err.strerror}")
            return Inventory(warnings=tuple(self.warnings))

    def pass_over(self) -> Inventory:
        """Every entry read fully, each VF given its PF's isolate reading: what ``scan()``
        answers."""
        names = self.entries()
        if isinstance(names, Inventory):
            return names
        found = {name: self.read_entry(name) for name in names}
        follow_pf_isolate(found)
        devices = {name: None if read is None else read.device for name, read in found.items()}
        return self.inventory(self.collect(names, devices.__getitem__))

    def collect(
        self, names: list[str], device_of: Callable[[str], UacceDevice | None]
    ) -> list[UacceDevice]:
        """The device of each entry, in listing order, without a second one per PCI function."""
        devices: dict[str, UacceDevice] = {}
        for name in names:
            device = device_of(name)
            if device is not None:
                self.admit(devices, name, device)
        return list(devices.values())

    def read_entry(self, name: str) -> DeviceRead | None:
        """Read one entry fully; None for another driver's entry or one skipped with a warning."""
        engine = engine_for_uacce_name(name)
        if engine is None:
            log.debug("ignoring %s: not a KAE engine's uacce device", name)
            return None
        return self.read_device(name, engine)

    def admit(self, devices: dict[str, UacceDevice], name: str, device: UacceDevice) -> None:
        """Add ``device`` unless its PCI function is already taken (the PCI address is the key)."""
        first = devices.get(device.pci_address)
        if first is not None:
            self.warn(
                f"skipping {self.class_dir}/{name}: PCI function {device.pci_address} "
                f"already reported as {first.name}"
            )
            return
        devices[device.pci_address] = device

    def inventory(self, devices: list[UacceDevice]) -> Inventory:
        ordered = sorted(devices, key=lambda d: (d.engine, d.pci_address))
        return Inventory(devices=tuple(ordered), warnings=tuple(self.warnings))

    def read_device(self, name: str, engine: Engine) -> DeviceRead | None:
        """Everything about one ``class/uacce`` entry; None (with a warning) when it is skipped."""
        entry = f"{self.class_dir}/{name}"
        uacce_dir = resolve_dir(entry)
        if uacce_dir is None or not inside(uacce_dir, self.sysfs_root):
            self.warn(f"skipping {entry}: does not resolve to a device directory under the root")
            return None
        pci_dir, link_ok = self.pci_function(uacce_dir)
        if pci_dir is None:
            self.warn(f"skipping {entry}: cannot tell which PCI function it belongs to")
            return None
        return self.read_found(name, engine, uacce_dir, pci_dir, link_ok)

    def read_found(
        self, name: str, engine: Engine, uacce_dir: str, pci_dir: str, link_ok: bool
    ) -> DeviceRead:
        """The device of an entry whose directory and PCI function are known."""
        attrs, api = AttributeReader.with_api(uacce_dir)
        readings: VolatileReadings = (
            attrs("isolate"),
            attrs("dev_state"),
            attrs("available_instances"),
        )
        driver_bound, driver, driver_version = self.driver_of(pci_dir)
        volatile = volatile_fields(
            readings,
            dev_node_exists=os.path.exists(f"{self.dev_root}/{name}"),
            driver_bound=driver_bound,
            device_link_ok=link_ok,
        )
        function, parent_pf = self.function_of(pci_dir, engine)
        algorithms = attrs("algorithms")
        flags = parse_int(attrs("flags"))
        device = UacceDevice(
            name=name,
            engine=engine.name,
            resource=engine.resource,
            pci_address=pci_dir.rpartition("/")[2],
            function=function,
            parent_pf=parent_pf,
            numa_node=self.numa_node(attrs("node_id"), pci_dir),
            api=text(api),
            flags=flags,
            sva=sva_of(flags, text(api), attrs.base != uacce_dir),
            algorithms=tuple(algorithms.split()) if isinstance(algorithms, str) else (),
            dev_node=f"/dev/{name}",
            sysfs_path=uacce_dir,
            pci_path=pci_dir,
            driver=driver,
            driver_version=driver_version,
            available_instances=volatile.available_instances,
            isolate=volatile.isolate,
            dev_state=volatile.dev_state,
            dev_node_exists=volatile.dev_node_exists,
            health=volatile.health,
            reasons=volatile.reasons,
        )
        return DeviceRead(device, attrs.base, readings, driver_bound, link_ok)

    def pci_function(self, uacce_dir: str) -> tuple[str | None, bool]:
        """The PCI function directory, and whether the ``device`` link led there.

        The kernel places the class device at ``<pci function>/uacce/<name>``, so when the
        ``device`` link is broken the path itself still names the function.
        """
        linked = resolve_dir(f"{uacce_dir}/device")
        if linked is not None and PCI_ADDRESS.match(linked.rpartition("/")[2]):
            return linked, True
        parent = os.path.dirname(uacce_dir)
        if os.path.basename(parent) == "uacce":
            by_path = os.path.dirname(parent)
            if PCI_ADDRESS.match(os.path.basename(by_path)):
                return by_path, False
        return None, False

    def driver_of(self, pci_dir: str) -> tuple[bool, str | None, str | None]:
        """Whether a driver is bound (its ``driver`` link leads to a directory), its name and
        its module's version, found through ``driver/module``.

        Devices share a handful of drivers, so each driver is looked up once per listing: one
        ``readlink`` per device.
        """
        link = f"{pci_dir}/driver"
        try:
            target = os.readlink(link)
            driver_dir = os.path.normpath(target if target[:1] == "/" else f"{pci_dir}/{target}")
        except OSError as err:
            # Not a link at all (EINVAL): a directory there still counts as bound, unnamed.
            return err.errno == errno.EINVAL and os.path.isdir(link), None, None
        known = self.drivers.get(driver_dir)
        if known is None:
            bound = os.path.isdir(driver_dir)
            version = _module_version(driver_dir) if bound else None
            known = self.drivers[driver_dir] = (bound, os.path.basename(driver_dir), version)
        bound, name, version = known
        return (True, name, version) if bound else (False, None, None)

    @staticmethod
    def function_of(pci_dir: str, engine: Engine) -> tuple[Function, str | None]:
        try:
            target = os.readlink(f"{pci_dir}/physfn").rstrip("/").rpartition("/")[2]
        except OSError:  # no physfn link (absent, or not a link): not a VF by its link
            target = None
        if target is not None:
            return Function.VF, target if PCI_ADDRESS.match(target) else None
        device_id = text(read_attribute(f"{pci_dir}/device"))
        if device_id is not None and device_id.lower() == engine.vf_device_id:
            return Function.VF, None
        return Function.PF, None

    @staticmethod
    def numa_node(node_id: Reading, pci_dir: str) -> int | None:
        value = parse_int(node_id)
        if value is None:
            value = parse_int(read_attribute(f"{pci_dir}/numa_node"))
        return value if value is not None and value >= 0 else None


def _module_version(driver_dir: str) -> str | None:
    """The version of the module behind a driver, None where it has no module (built in)."""
    module_dir = resolve_dir(f"{driver_dir}/module")
    return None if module_dir is None else module_version(module_dir)


def module_version(module_dir: str) -> str | None:
    """A ``/sys/module/<name>`` directory's ``version`` where the module sets MODULE_VERSION, else
    its ``srcversion`` (a checksum of its sources), else None."""
    found = (text(read_attribute(f"{module_dir}/{a}")) for a in ("version", "srcversion"))
    return next((v for v in found if v is not None), None)


def read_available_instances(device: UacceDevice) -> int | None:
    """The device's free queues now, read from sysfs (None while unreadable or negative).

    The scan loop does not read ``available_instances`` per tick (only full passes do): what
    needs the current figure, the metrics at scrape time, reads it here.
    """
    value = parse_int(AttributeReader(device.sysfs_path)("available_instances"))
    return value if value is not None and value >= 0 else None


def scan(sysfs_root: Path, dev_root: Path) -> Inventory:
    """Discover every KAE UACCE device under ``sysfs_root``; never raises on odd input."""
    return DeviceReader(sysfs_root, dev_root).pass_over()
