"""Nodes on which no uacce device exists, for the three reasons `doctor` tells apart.

* ``no-kae-hardware``: an x86_64 server; its PCI functions are another vendor's.
* ``driver-not-loaded``: a 2-socket Kunpeng 920 whose six engines are on the bus, unbound, with
  no KAE module loaded.
* ``no-uacce-device``: the same engines bound to their drivers, loaded with ``uacce_mode=0`` (the
  mainline default: register with the crypto API only), so no uacce class exists.

Written in the kernel's layout with the same conventions as
:mod:`kae_deviceplugin.testing.sysfs_builder` (relative links, a newline after each value).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from kae_deviceplugin.core.engines import ENGINES_BY_NAME, HUAWEI_PCI_VENDOR
from kae_deviceplugin.testing.sysfs_builder import function_dir, set_driver_bound
from kae_deviceplugin.testing.sysfs_trees import KUNPENG920_PFS

# MIDR_EL1 of a Kunpeng 920 core: implementer 0x48 (HiSilicon), part 0xd01 (TSV110).
KUNPENG920_MIDR = "0x00000000481fd010"
INTEL_VENDOR = "0x8086"
_DRIVER_ENGINE = {"hisi_hpre": "hpre", "hisi_sec2": "sec", "hisi_zip": "zip"}


def _write(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def add_cpus(root: Path, count: int, midr: str | None) -> None:
    """``count`` CPUs; an arm64 one shows its MIDR_EL1 under ``regs/identification``."""
    for index in range(count):
        cpu = root / "sys" / "devices" / "system" / "cpu" / f"cpu{index}"
        _write(cpu / "online", "1")
        if midr is not None:
            _write(cpu / "regs" / "identification" / "midr_el1", midr)


def add_pci_function(root: Path, address: str, root_port: str, vendor: str, device: str) -> Path:
    """A PCI function with its ``vendor`` and ``device``, listed in ``bus/pci/devices``."""
    fn = function_dir(root, root_port, address)
    _write(fn / "vendor", vendor)
    _write(fn / "device", device)
    bus = root / "sys" / "bus" / "pci"
    _link(fn / "subsystem", bus)
    _link(bus / "devices" / address, fn)
    return fn


def add_module(root: Path, name: str, parameters: dict[str, str]) -> None:
    """A loaded module, ``sys/module/<name>``, with its ``parameters/`` files."""
    module = root / "sys" / "module" / name
    module.mkdir(parents=True, exist_ok=True)
    for key, value in parameters.items():
        _write(module / "parameters" / key, value)


def _kunpeng_engines(root: Path) -> None:
    add_cpus(root, 4, KUNPENG920_MIDR)
    for (driver, _socket), (address, port) in sorted(KUNPENG920_PFS.items()):
        engine = ENGINES_BY_NAME[_DRIVER_ENGINE[driver]]
        add_pci_function(root, address, port, HUAWEI_PCI_VENDOR, engine.pf_device_id)


def no_kae_hardware(root: Path) -> None:
    """An x86_64 server: a host bridge and a NIC, no Huawei function, no KAE module."""
    add_cpus(root, 4, None)
    add_pci_function(root, "0000:00:00.0", "0000:00:00.0", INTEL_VENDOR, "0x2020")
    add_pci_function(root, "0000:17:00.0", "0000:16:00.0", INTEL_VENDOR, "0x1572")
    (root / "dev").mkdir(parents=True, exist_ok=True)


def driver_not_loaded(root: Path) -> None:
    """The six engine PFs of a 2-socket Kunpeng 920, no driver bound, no module loaded."""
    _kunpeng_engines(root)
    (root / "dev").mkdir(parents=True, exist_ok=True)


def no_uacce_device(root: Path) -> None:
    """The six engine PFs bound to their drivers, loaded with uacce_mode=0: no uacce class."""
    _kunpeng_engines(root)
    for driver in _DRIVER_ENGINE:
        add_module(root, driver, {"uacce_mode": "0"})
        _link(
            root / "sys" / "bus" / "pci" / "drivers" / driver / "module",
            root / "sys" / "module" / driver,
        )
    for (driver, _socket), (address, _port) in sorted(KUNPENG920_PFS.items()):
        set_driver_bound(root, address, True, driver)
    (root / "dev").mkdir(parents=True, exist_ok=True)


CASES: dict[str, Callable[[Path], None]] = {
    "no-kae-hardware": no_kae_hardware,
    "driver-not-loaded": driver_not_loaded,
    "no-uacce-device": no_uacce_device,
}
