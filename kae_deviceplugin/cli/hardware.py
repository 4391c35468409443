"""`doctor`'s hardware checks: which KAE engines are on the PCI bus, and why they have no device.

Read from sysfs alone (the plugin's image has no lspci): ``bus/pci/devices/*/{vendor,device}``
for the engines' PCI functions, each function's ``driver`` link, ``module/<driver>`` and its
``uacce_mode`` parameter, and the CPU's MIDR_EL1 (``devices/system/cpu/cpu*/regs/identification``,
shown on arm64 only). A node is one of: no KAE hardware; hardware whose driver is not loaded (or
not bound); a driver loaded with no uacce device; or devices, which the device rows then judge.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from pathlib import Path

from kae_deviceplugin.cli.checks import Row, Status
from kae_deviceplugin.core.engines import ENGINES, HUAWEI_PCI_VENDOR, Engine
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.absence import Absence, no_uacce_fixes, pci_functions
from kae_deviceplugin.discovery.absence import PciFunction as Function
from kae_deviceplugin.discovery.node_facts import (
    CPU_PARTS,
    HISILICON_IMPLEMENTER,
    proc_root_for,
    read_cpu,
    read_driver,
)
from kae_deviceplugin.discovery.scan import module_version

NO_HARDWARE_FIX = (
    "nothing to load here: keep the plugin to KAE nodes (the chart's nfd.requireLabel=true "
    "selects nodes labelled openfuyao.com/kae.present=true)"
)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def cpu_description(sysfs_root: Path) -> str:
    """The CPU as MIDR_EL1 names it, or the machine type where sysfs shows none."""
    cpus = sysfs_root / "devices" / "system" / "cpu"
    for midr_file in sorted(cpus.glob("cpu*/regs/identification/midr_el1")):
        try:
            midr = int(_read(midr_file) or "", 16)
        except ValueError:
            continue
        implementer, part = midr >> 24 & 0xFF, midr >> 4 & 0xFFF
        if implementer == HISILICON_IMPLEMENTER:
            return f"arm64, HiSilicon {CPU_PARTS.get(part, f'part {part:#x}')}"
        return f"arm64, implementer {implementer:#x} (not HiSilicon: no KAE engines)"
    cpu = read_cpu(sysfs_root, proc_root_for(sysfs_root))  # an arm64 kernel's /proc/cpuinfo
    if cpu.implementer is not None:
        return f"arm64, {cpu.describe()}"
    if sysfs_root.resolve() == Path("/sys"):
        return f"{platform.machine()} (KAE engines come with Kunpeng arm64 SoCs)"
    if cpus.is_dir():
        return "not arm64 (no MIDR_EL1 in sysfs; KAE engines come with Kunpeng arm64 SoCs)"
    return "unknown"


def _addresses(functions: Sequence[Function]) -> str:
    return ", ".join(f.address for f in functions)


def _missing_devices(sysfs_root: Path, engine: Engine, functions: list[Function]) -> Row:
    """Why functions of ``engine`` have no uacce device, naming the functions and the fix."""
    check, driver = f"engine {engine.name}", engine.driver
    module = sysfs_root / "module" / driver
    others = [f for f in functions if f.driver not in (None, driver)]
    if others:
        fixes = tuple(
            f"echo {f.address} > /sys/bus/pci/drivers/{f.driver}/unbind; "
            f"echo {f.address} > /sys/bus/pci/drivers/{driver}/bind"
            for f in others
        )
        bound = ", ".join(f"{f.address} to {f.driver}" for f in others)
        return Row(check, Status.FAIL, f"bound to another driver: {bound}", fixes)
    unbound = [f for f in functions if f.driver is None]
    if unbound and not module.is_dir():
        detail = f"hardware present, driver not loaded: {_addresses(unbound)}"
        fix = f"on the node: modprobe {driver} (openEuler's KAE driver packages provide it)"
        return Row(check, Status.FAIL, detail, (fix,))
    if unbound:
        detail = f"driver {driver} loaded, not bound to {_addresses(unbound)}"
        binds = [
            f"on the node: echo {f.address} > /sys/bus/pci/drivers/{driver}/bind" for f in unbound
        ]
        binds.append("if binding fails, the node's kernel log says why the probe failed")
        return Row(check, Status.FAIL, detail, tuple(binds))
    detail = f"driver {driver} loaded, no uacce device for {_addresses(functions)}"
    if _read(module / "parameters" / "uacce_mode") == "0":
        fix = f"{driver} was loaded with uacce_mode=0 (crypto API only): on the node, "
        fix += f"modprobe -r {driver} && modprobe {driver} uacce_mode=1"
    elif not (sysfs_root / "class" / "uacce").is_dir():
        fix = "the kernel has no uacce class: it needs CONFIG_UACCE (the uacce module)"
    else:  # the kernel's own driver without SVA, or what the kernel log says
        facts = read_driver(sysfs_root, driver)
        return Row(check, Status.FAIL, detail, no_uacce_fixes(sysfs_root, functions, facts))
    return Row(check, Status.FAIL, detail, (fix,))


def _engine_row(
    sysfs_root: Path,
    engine: Engine,
    functions: list[Function],
    inv: Inventory,
    absence: Absence | None = None,
) -> Row:
    check = f"engine {engine.name}"
    ids = f"{HUAWEI_PCI_VENDOR[2:]}:{engine.pf_device_id[2:]}/{engine.vf_device_id[2:]}"
    with_device = {d.pci_address for d in inv if d.engine == engine.name}
    if not functions and not with_device:
        detail = f"no {engine.name.upper()} function ({ids}) on this node"
        if absence is None:  # not a HiSilicon CPU: nothing is missing
            return Row(check, Status.SKIP, detail)
        return Row(check, Status.WARN, f"{detail}: {absence.detail}", absence.fixes)
    missing = [f for f in functions if f.address not in with_device]
    if missing:
        return _missing_devices(sysfs_root, engine, missing)
    module = sysfs_root / "module" / engine.driver
    version = module_version(str(module)) if module.is_dir() else None
    # A built-in driver has no module directory, or one without initstate (issue 37).
    built_in = read_driver(sysfs_root, engine.driver).provenance in (None, "built-in")
    loaded = "built in" if built_in else "loaded"
    loaded += f", version {version or 'unknown'}" if module.is_dir() else ""
    pfs = sum(not f.virtual for f in functions)
    counts = f"{pfs} PF, {len(functions) - pfs} VF" if functions else f"{len(with_device)} devices"
    return Row(check, Status.OK, f"{counts}; driver {engine.driver} {loaded}")


def check_hardware(
    sysfs_root: Path, inventory: Inventory, absent: Sequence[Absence] = ()
) -> tuple[list[Row], bool]:
    """The hardware row and one row per engine; and whether any KAE hardware was found.

    ``absent`` (the node facts' likely causes, given only on a HiSilicon CPU) says why an engine
    has no function on the bus; on a node with none at all, why there is no KAE hardware."""
    count, functions = pci_functions(sysfs_root)
    cpu = cpu_description(sysfs_root)
    causes = {a.engine: a for a in absent}
    if not functions and not inventory.devices:
        detail = (
            f"no KAE hardware on this node: none of the {count} PCI functions in "
            f"{sysfs_root / 'bus' / 'pci' / 'devices'} is a KAE engine (vendor "
            f"{HUAWEI_PCI_VENDOR[2:]}); CPU: {cpu}"
        )
        fixes: tuple[str, ...] = (NO_HARDWARE_FIX,)
        likely = [a for a in absent if not a.cause.startswith("driver")]
        if likely:  # a Kunpeng without engines: the likely cause, and its fix first
            detail += f"; {likely[0].detail}"
            fixes = (*likely[0].fixes, NO_HARDWARE_FIX)
        return [Row("hardware", Status.FAIL, detail, fixes)], False
    shown = ", ".join(f"{e.name} {sum(f.engine == e for f in functions)}" for e in ENGINES)
    rows = [Row("hardware", Status.OK, f"KAE functions: {shown}; CPU: {cpu}")]
    for engine in ENGINES:
        mine = [f for f in functions if f.engine == engine]
        rows.append(_engine_row(sysfs_root, engine, mine, inventory, causes.get(engine.name)))
    return rows, True
