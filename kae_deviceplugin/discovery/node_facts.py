"""The node's KAE facts beyond its devices, read from sysfs and ``/proc`` only (issue 37).

* **SVA per device** is read by the scan (``UacceDevice.sva``, rule in
  :func:`kae_deviceplugin.discovery.attributes.sva_of`); here it is summed up per engine.
* **The drivers**, ``/sys/module/<driver>`` (``Documentation/ABI/stable/sysfs-module``,
  ``testing/sysfs-module``): the parameters ``uacce_mode`` and ``pf_q_num``; ``version`` and
  ``srcversion``; the provenance: a loaded module has ``initstate`` (and ``refcnt``, ``taint``),
  a built-in driver has none of them (its directory exists only because it has parameters or a
  version), and ``taint`` holds ``O`` for a module built outside the kernel's tree (KAE's
  driver packages), nothing for the kernel's own.
* **CMA**, ``/proc/meminfo`` ``CmaTotal``/``CmaFree`` (absent on kernels without CONFIG_CMA):
  devices without SVA take their memory from it.
* **The CPU**: MIDR_EL1 (``devices/system/cpu/cpu0/regs/identification/midr_el1``), else the
  first block of ``/proc/cpuinfo`` (``CPU implementer``, ``CPU part``); implementer 0x48 is
  HiSilicon, whose server cores are Kunpeng's. **Sockets**: distinct
  ``topology/physical_package_id`` of the CPUs.
* **Why an engine is absent** on a Kunpeng (:mod:`.absence`): likely causes, never facts.

``/proc`` is read beside the sysfs root (:func:`proc_root_for`): ``/proc`` for ``/sys``, a fake
tree's ``<root>/proc`` for its ``<root>/sys``. Every file may be missing (older kernels, other
architectures, a container without it): a fact is then unknown (None), never an error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.model import Inventory, UacceDevice
from kae_deviceplugin.discovery.absence import Absence, absences
from kae_deviceplugin.discovery.attributes import parse_int, read_attribute, text

Provenance = Literal["out-of-tree", "in-tree", "built-in"]
HISILICON_IMPLEMENTER = 0x48
# MIDR_EL1 part numbers of HiSilicon cores (arch/arm64/include/asm/cputype.h).
CPU_PARTS = {0xD01: "Kunpeng 920", 0xD02: "HIP09", 0xD06: "HIP12"}
KIB = 1024
_MEMINFO_LINE = re.compile(r"^(\w+):\s+(\d+) kB$")


def proc_root_for(sysfs_root: Path) -> Path:
    """The ``/proc`` beside a sysfs root: ``/proc`` for ``/sys``, ``<tree>/proc`` for
    ``<tree>/sys`` (the chart's ``fixtureRoot`` and the tests' trees)."""
    return sysfs_root.parent / "proc"


@dataclass(frozen=True, slots=True)
class DriverFacts:
    """What ``/sys/module/<driver>`` says; ``provenance`` None where it is not there."""

    driver: str
    provenance: Provenance | None = None
    version: str | None = None
    srcversion: str | None = None
    uacce_mode: int | None = None
    pf_q_num: int | None = None

    @property
    def loaded(self) -> bool:
        """Loaded as a module or built in: the kernel knows the driver."""
        return self.provenance is not None


@dataclass(frozen=True, slots=True)
class Cma:
    """The CMA area in bytes; None where meminfo shows no Cma lines (or is not readable)."""

    total: int | None = None
    free: int | None = None


@dataclass(frozen=True, slots=True)
class Cpu:
    """The boot CPU's MIDR_EL1 fields; None where neither sysfs nor cpuinfo shows them."""

    implementer: int | None = None
    part: int | None = None

    @property
    def hisilicon(self) -> bool:
        return self.implementer == HISILICON_IMPLEMENTER

    def describe(self) -> str:
        if self.implementer is None:
            return "unknown"
        if self.hisilicon:
            part = self.part if self.part is not None else -1
            return f"HiSilicon {CPU_PARTS.get(part, f'part {part:#x}')}"
        return f"implementer {self.implementer:#x} (not HiSilicon)"


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """Everything above, for one node at one moment."""

    drivers: Mapping[str, DriverFacts] = field(default_factory=dict)  # by engine name
    cma: Cma = Cma()
    cpu: Cpu = Cpu()
    absent: tuple[Absence, ...] = ()

    def without_sva(self, inventory: Inventory) -> list[UacceDevice]:
        return [d for d in inventory if d.sva is False]


def read_driver(sysfs_root: Path, driver: str) -> DriverFacts:
    """``/sys/module/<driver>``: provenance, versions and the two QM parameters."""
    module = f"{sysfs_root}/module/{driver}"
    if not os.path.isdir(module):
        return DriverFacts(driver)
    taint = read_attribute(f"{module}/taint")
    provenance: Provenance
    if read_attribute(f"{module}/initstate") is None and taint is None:
        provenance = "built-in"
    elif isinstance(taint, str) and "O" in taint:
        provenance = "out-of-tree"
    else:
        provenance = "in-tree"
    return DriverFacts(
        driver,
        provenance,
        version=text(read_attribute(f"{module}/version")),
        srcversion=text(read_attribute(f"{module}/srcversion")),
        uacce_mode=parse_int(read_attribute(f"{module}/parameters/uacce_mode")),
        pf_q_num=parse_int(read_attribute(f"{module}/parameters/pf_q_num")),
    )


def read_cma(proc_root: Path) -> Cma:
    """CmaTotal and CmaFree of ``<proc>/meminfo``, in bytes."""
    reading = read_attribute(f"{proc_root}/meminfo")
    if not isinstance(reading, str):
        return Cma()
    values: dict[str, int] = {}
    for line in reading.splitlines():
        match = _MEMINFO_LINE.match(line.strip())
        if match is not None and match[1] in ("CmaTotal", "CmaFree"):
            values[match[1]] = int(match[2]) * KIB
    return Cma(values.get("CmaTotal"), values.get("CmaFree"))


def read_cpu(sysfs_root: Path, proc_root: Path) -> Cpu:
    """The boot CPU: MIDR_EL1 from sysfs (arm64 only), else ``/proc/cpuinfo``'s first block."""
    midr_file = f"{sysfs_root}/devices/system/cpu/cpu0/regs/identification/midr_el1"
    midr = parse_int(read_attribute(midr_file))
    if midr is not None:
        return Cpu(midr >> 24 & 0xFF, midr >> 4 & 0xFFF)
    reading = read_attribute(f"{proc_root}/cpuinfo")
    if not isinstance(reading, str):
        return Cpu()
    fields: dict[str, str] = {}
    for line in reading.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return Cpu(parse_int(fields.get("CPU implementer")), parse_int(fields.get("CPU part")))


def engine_sva(devices: Iterable[UacceDevice]) -> str | None:
    """``true`` when every device of the engine has SVA, ``false`` when none has, ``mixed``
    otherwise; None when no device's flags could be read."""
    known = {d.sva for d in devices if d.sva is not None}
    if not known:
        return None
    return "mixed" if len(known) > 1 else str(known.pop()).lower()


def read_node_facts(
    sysfs_root: Path, inventory: Inventory, proc_root: Path | None = None
) -> NodeFacts:
    """Every fact above; the PCI bus and the sockets are read only when an engine is absent."""
    proc = proc_root_for(sysfs_root) if proc_root is None else proc_root
    drivers = {e.name: read_driver(sysfs_root, e.driver) for e in ENGINES}
    cpu = read_cpu(sysfs_root, proc)
    facts = NodeFacts(drivers, read_cma(proc), cpu)
    present = {d.engine for d in inventory}
    if all(e.name in present for e in ENGINES):
        return facts
    return NodeFacts(drivers, facts.cma, cpu, absences(sysfs_root, inventory, cpu, drivers))
