"""Why a KAE engine has no device on this node: likely causes, from the PCI bus and the CPU.

An engine whose PCI functions are on the bus (``bus/pci/devices/*/{vendor,device}``, vendor
0x19e5 and the engine's PF/VF IDs) but that has no uacce device: another driver holds them, its
driver is not loaded, loaded but not bound, or bound without a uacce device. An engine with no
function at all, on a HiSilicon (Kunpeng) CPU: in a VM, none was passed through; on a
single-socket node without the SEC, TEE likely holds it (KAE's FAQ: on single-socket servers
TEE and the SEC are exclusive, a BIOS setting); otherwise the KAE licence is likely missing
(without it the engines stay off the PCI bus; the newer Kunpeng 920 model needs none from BIOS
21.23). Each is stated as likely: sysfs shows the symptom, not the cause. On another CPU an
absent engine is no fault at all, so nothing is said.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kae_deviceplugin.core.engines import ENGINES, HUAWEI_PCI_VENDOR, Engine
from kae_deviceplugin.core.model import Function, Inventory
from kae_deviceplugin.discovery.attributes import parse_int, read_attribute, text

if TYPE_CHECKING:  # node_facts imports this module
    from kae_deviceplugin.discovery.node_facts import Cpu, DriverFacts

_CPU_DIR = re.compile(r"^cpu\d+$")
NOT_PASSED_THROUGH = "not-passed-through"
TEE_HOLDS_SEC = "tee-holds-sec"
NO_LICENCE = "no-licence"
DRIVER_OTHER = "driver-other"
DRIVER_NOT_LOADED = "driver-not-loaded"
DRIVER_UNBOUND = "driver-unbound"
NO_UACCE = "no-uacce"


@dataclass(frozen=True, slots=True)
class PciFunction:
    """A KAE engine's PCI function and the driver bound to it (None: unbound)."""

    address: str
    engine: Engine
    virtual: bool
    driver: str | None


@dataclass(frozen=True, slots=True)
class Absence:
    """An engine with no device here and why, likely: ``cause`` is a code (a label value),
    ``detail`` says it as a likelihood, ``fixes`` what to do."""

    engine: str
    cause: str
    detail: str
    fixes: tuple[str, ...] = ()


def pci_functions(sysfs_root: Path) -> tuple[int, list[PciFunction]]:
    """How many PCI functions the node has, and those that are KAE engines."""
    devices = f"{sysfs_root}/bus/pci/devices"
    try:
        entries = sorted(os.listdir(devices))
    except OSError:
        return 0, []
    ids = {e.pf_device_id: (e, False) for e in ENGINES} | {
        e.vf_device_id: (e, True) for e in ENGINES
    }
    found = []
    for address in entries:
        if text(read_attribute(f"{devices}/{address}/vendor")) != HUAWEI_PCI_VENDOR:
            continue
        match = ids.get(text(read_attribute(f"{devices}/{address}/device")) or "")
        if match is not None:
            found.append(PciFunction(address, match[0], match[1], _bound_driver(devices, address)))
    return len(entries), found


def _bound_driver(devices: str, address: str) -> str | None:
    try:
        return os.path.basename(os.readlink(f"{devices}/{address}/driver"))
    except OSError:
        return None


def count_sockets(sysfs_root: Path) -> int | None:
    """Distinct ``topology/physical_package_id`` of the CPUs; None where no CPU shows one."""
    cpus = f"{sysfs_root}/devices/system/cpu"
    try:
        names = [n for n in os.listdir(cpus) if _CPU_DIR.match(n)]
    except OSError:
        return None
    packages = {
        parse_int(read_attribute(f"{cpus}/{name}/topology/physical_package_id")) for name in names
    }
    packages.discard(None)
    return len(packages) or None


def absences(
    sysfs_root: Path, inventory: Inventory, cpu: Cpu, drivers: Mapping[str, DriverFacts]
) -> tuple[Absence, ...]:
    """One likely cause per engine that has no device on this node."""
    present = {d.engine for d in inventory}
    missing = [e for e in ENGINES if e.name not in present]
    if not missing:
        return ()
    _count, functions = pci_functions(sysfs_root)
    found = []
    for engine in missing:
        mine = [f for f in functions if f.engine == engine]
        if mine:
            found.append(with_functions(sysfs_root, engine, mine, drivers[engine.name]))
        elif cpu.hisilicon:
            found.append(without_functions(sysfs_root, engine, functions, inventory))
    return tuple(found)


def _addresses(functions: Sequence[PciFunction]) -> str:
    return ", ".join(f.address for f in functions)


def with_functions(
    sysfs_root: Path, engine: Engine, functions: list[PciFunction], driver: DriverFacts
) -> Absence:
    """The engine's functions are on the bus, none with a uacce device."""
    name = engine.driver
    others = [f for f in functions if f.driver not in (None, name)]
    if others:
        held = ", ".join(f"{f.address} by {f.driver}" for f in others)
        fix = f"to serve it here, unbind it from {others[0].driver} and bind it to {name}"
        return Absence(engine.name, DRIVER_OTHER, f"likely held by another driver: {held}", (fix,))
    if all(f.driver is None for f in functions) and not driver.loaded:
        detail = f"likely its driver is not loaded: {_addresses(functions)} bound to none"
        fix = f"on the node: modprobe {name} (openEuler's KAE driver packages provide it)"
        return Absence(engine.name, DRIVER_NOT_LOADED, detail, (fix,))
    unbound = [f for f in functions if f.driver is None]
    if unbound:
        detail = f"likely {name} is loaded but not bound to {_addresses(unbound)}"
        fix = f"on the node: echo {unbound[0].address} > /sys/bus/pci/drivers/{name}/bind"
        return Absence(engine.name, DRIVER_UNBOUND, detail, (fix,))
    detail = f"{name} is bound to {_addresses(functions)} but registered no uacce device"
    return Absence(engine.name, NO_UACCE, detail, no_uacce_fixes(sysfs_root, functions, driver))


def no_uacce_fixes(
    sysfs_root: Path, functions: Sequence[PciFunction], driver: DriverFacts
) -> tuple[str, ...]:
    """Why a bound driver made no uacce device: its mode, or no SVA for an in-tree driver."""
    name = driver.driver
    if driver.uacce_mode == 0:
        return (
            f"{name} was loaded with uacce_mode=0 (crypto API only): on the node, "
            f"modprobe -r {name} && modprobe {name} uacce_mode=1",
        )
    if driver.provenance in ("in-tree", "built-in"):
        iommu = any(
            os.path.lexists(f"{sysfs_root}/bus/pci/devices/{f.address}/iommu_group")
            for f in functions
        )
        why = "" if iommu else ", and these functions have no IOMMU group"
        return (
            f"{name} is the kernel's own driver, which registers uacce devices only with SVA "
            f"(the SMMU on, with SVA){why}: turn the SMMU on, or install KAE's driver and load "
            "it with uacce_mode=2 (no SVA)",
        )
    return (f"the kernel log of {functions[0].address} says why no uacce device registered",)


def without_functions(
    sysfs_root: Path, engine: Engine, functions: list[PciFunction], inventory: Inventory
) -> Absence:
    """No function of the engine on the bus of a HiSilicon node."""
    label = engine.name.upper()
    pfs = any(not f.virtual for f in functions) or any(d.function is Function.PF for d in inventory)
    vfs = any(f.virtual for f in functions) or any(d.function is Function.VF for d in inventory)
    if vfs and not pfs:
        detail = f"likely a VM given no {label} function (only VFs are passed through to VMs)"
        fix = f"pass a {label} VF through to this VM, if it should have one"
        return Absence(engine.name, NOT_PASSED_THROUGH, detail, (fix,))
    others = bool(functions or inventory.devices)
    if engine.name == "sec" and others and count_sockets(sysfs_root) == 1:
        detail = "likely held by TEE: on a single-socket Kunpeng, TEE and the SEC are exclusive"
        fix = "if the node needs no TEE, turn TEE off in the BIOS; that releases the SEC"
        return Absence(engine.name, TEE_HOLDS_SEC, detail, (fix,))
    detail = "likely no KAE licence: without one the engines stay off the PCI bus"
    fix = (
        "load the KAE licence (through the BMC); the newer Kunpeng 920 model needs none from "
        "BIOS 21.23"
    )
    return Absence(engine.name, NO_LICENCE, detail, (fix,))
