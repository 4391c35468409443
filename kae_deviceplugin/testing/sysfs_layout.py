"""What the kernel shows for a UACCE device: the spec of one device and its file contents.

Pure data and string formatting; :mod:`kae_deviceplugin.testing.sysfs_builder` writes it to
disk. The values are those of a Kunpeng 920 (see FACTS.md section 3 and
``sysfs_fixtures/README.md``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kae_deviceplugin.core.engines import ENGINES, HUAWEI_PCI_VENDOR, Engine

_MAINLINE = (
    "api",
    "flags",
    "available_instances",
    "algorithms",
    "region_mmio_size",
    "region_dus_size",
)
_ISOLATE = (*_MAINLINE, "isolate", "isolate_strategy")

# Which uacce attributes each kernel family shows (see FACTS.md section 3).
LAYOUTS: dict[str, tuple[str, ...]] = {
    "mainline": _MAINLINE,
    "mainline-isolate": _ISOLATE,
    "kae2": (*_ISOLATE, "node_id", "numa_distance", "dev_state"),
    "kae1": (
        "api",
        "flags",
        "available_instances",
        "algorithms",
        "id",
        "qfrs_offset",
        "node_id",
        "numa_distance",
    ),
}
# openEuler 4.19 put the attribute group in a named subdirectory.
ATTRS_SUBDIR = {"kae1": "attrs"}

# What ``/sys/module/<driver>`` shows about the module's version, per kernel family: the
# out-of-tree KAE driver packages set MODULE_VERSION (``version``, and with it ``srcversion``); the
# in-tree drivers set none, so only a kernel built with CONFIG_MODULE_SRCVERSION_ALL (as 5.10
# distribution kernels often are) shows a ``srcversion``, and a 6.x one here shows neither.
MODULE_VERSION_FILES: dict[str, tuple[str, ...]] = {
    "kae1": ("version", "srcversion"),
    "kae2": ("version", "srcversion"),
    "mainline": ("srcversion",),
    "mainline-isolate": (),
}
# Placeholder version strings of the right shape (the fake trees' own, not a release's).
_MODULE_VERSION = {"kae1": "1.3.11", "kae2": "2.0.2"}
# What every loaded (not built-in) module shows (Documentation/ABI/stable/sysfs-module and
# testing/sysfs-module): ``initstate`` ("live"), ``refcnt`` (with CONFIG_MODULE_UNLOAD) and
# ``taint``, the module's own taint letters: KAE's driver packages are built outside the kernel
# tree and unsigned on openEuler's signing kernels ("OE"); an in-tree module shows none (an empty
# line). A built-in driver has none of the three (leave them out with None).
_MODULE_TAINT = {"kae1": "OE", "kae2": "OE", "mainline": "\n", "mainline-isolate": "\n"}
# The QM drivers' read-only parameters (0444, under ``parameters/``): ``uacce_mode`` 1 (uacce with
# SVA; 0 registers with the crypto API only, 2 is KAE's no-SVA mode), ``pf_q_num`` the PF's
# queues (the trees' PFs show 256 free queues), ``vfs_num`` the VFs enabled at probe (0).
_MODULE_PARAMETERS = {
    "parameters/uacce_mode": "1",
    "parameters/pf_q_num": "256",
    "parameters/vfs_num": "0",
}

# The kernel allocates the uacce major dynamically; any fixed value serves a fake tree.
UACCE_MAJOR = 241
SRIOV_TOTALVFS = 63
_PCI_CLASS = {"hisi_hpre": "0x100000", "hisi_sec2": "0x100000", "hisi_zip": "0x120000"}
# Bytes for 4 KiB pages and 1024-deep queues: doorbell pages; SQEs plus 16-byte CQEs.
_MMIO_SIZE = "8192"
_DUS_SIZE = {"hisi_hpre": "81920", "hisi_sec2": "147456", "hisi_zip": "147456"}
_QFR_NA = str(2**64 - 1)  # an unmapped region in qfrs_offset: (unsigned long)-1

_BDF = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([01][0-9a-f])\.([0-7])$")
_NAME = re.compile(r"^(.+)-(\d+)$")


def parse_bdf(address: str) -> tuple[int, int, int, int]:
    """Split ``dddd:bb:dd.f`` into (domain, bus, device, function)."""
    match = _BDF.match(address)
    if match is None:
        raise ValueError(f"not a PCI address: {address!r}")
    dom, bus, dev, fn = match.groups()
    return int(dom, 16), int(bus, 16), int(dev, 16), int(fn)


def vf_address(pf_address: str, index: int) -> str:
    """Address of VF ``index`` (0-based): functions 1..7 of the PF's device, then next devices."""
    dom, bus, dev, fn = parse_bdf(pf_address)
    devfn = dev * 8 + fn + 1 + index
    if not 0 <= index < SRIOV_TOTALVFS or devfn > 0xFF:
        raise ValueError(f"no VF {index} for {pf_address}")
    return f"{dom:04x}:{bus:02x}:{devfn // 8:02x}.{devfn % 8}"


@dataclass(frozen=True)
class DeviceSpec:
    """One UACCE device and the PCI function it sits on.

    ``attrs``, ``pci_attrs`` and ``module_attrs`` (the driver's ``/sys/module/<driver>`` files,
    written by the first device of that driver; ``parameters/<name>`` for a parameter) override
    the defaults per file: a string is
    written (a newline is added, as the kernel does, unless the string is empty or already ends
    with one), None leaves the file out. Keys outside the layout add files.
    """

    name: str
    pci_address: str
    root_port: str
    numa_node: int
    layout: str = "kae2"
    parent_pf: str | None = None
    revision: str = "0x21"
    attrs: Mapping[str, str | None] = field(default_factory=dict)
    pci_attrs: Mapping[str, str | None] = field(default_factory=dict)
    driver_bound: bool = True
    dev_node: bool = True
    device_link: bool = True
    module_attrs: Mapping[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if _NAME.match(self.name) is None:
            raise ValueError(f"uacce names are <driver>-<id>: {self.name!r}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown layout {self.layout!r}; known: {sorted(LAYOUTS)}")
        for address in (self.pci_address, self.root_port, self.parent_pf):
            if address is not None:
                parse_bdf(address)

    @property
    def driver(self) -> str:
        return self.name.rpartition("-")[0]

    @property
    def minor(self) -> int:
        return int(self.name.rpartition("-")[2])

    @property
    def engine(self) -> Engine | None:
        return next((e for e in ENGINES if e.driver == self.driver), None)


def uacce_attributes(spec: DeviceSpec) -> dict[str, str | None]:
    """The attribute files of the spec's uacce device, after its overrides."""
    engine = spec.engine
    # KAE 1.x shared-domain mode reports no flags; KAE 2.0 reports SVA + IOMMU.
    flags_by_layout = {"kae1": "0", "kae2": "129"}
    defaults = {
        "api": "hisi_qm_v3" if spec.revision == "0x30" else "hisi_qm_v2",
        "flags": flags_by_layout.get(spec.layout, "1"),
        "available_instances": "256",
        "algorithms": "\n".join(engine.algorithms) if engine else "",
        "region_mmio_size": _MMIO_SIZE,
        "region_dus_size": _DUS_SIZE.get(spec.driver, "147456"),
        "isolate": "0",
        "isolate_strategy": "0",
        "node_id": str(spec.numa_node),
        "numa_distance": "10",
        "dev_state": "0",
        "id": str(spec.minor),
        "qfrs_offset": _qfrs_offset(spec.driver),
    }
    values: dict[str, str | None] = {key: defaults[key] for key in LAYOUTS[spec.layout]}
    values.update(spec.attrs)
    return values


def _qfrs_offset(driver: str) -> str:
    # Start of each region (mmio, dko, dus, ss): the kernel prints them tab-separated.
    dus = int(_DUS_SIZE.get(driver, "147456"))
    return "\t".join(("0", _QFR_NA, _MMIO_SIZE, str(int(_MMIO_SIZE) + dus)))


def pci_attributes(spec: DeviceSpec) -> dict[str, str | None]:
    """The attribute files of the spec's PCI function, after its overrides."""
    engine = spec.engine
    device_id = "0x0000"
    if engine is not None:
        device_id = engine.vf_device_id if spec.parent_pf else engine.pf_device_id
    values: dict[str, str | None] = {
        "vendor": HUAWEI_PCI_VENDOR,
        "device": device_id,
        "revision": spec.revision,
        "class": _PCI_CLASS.get(spec.driver, "0x120000"),
        "numa_node": str(spec.numa_node),
    }
    if spec.parent_pf is None:
        values["sriov_totalvfs"] = str(SRIOV_TOTALVFS)
        values["sriov_numvfs"] = "0"
    values.update(spec.pci_attrs)
    return values


def module_attributes(spec: DeviceSpec) -> dict[str, str | None]:
    """The files of the spec's driver module (``parameters/<name>`` for a parameter), after its
    overrides."""
    # srcversion is 24 upper-case hex digits in the kernel (an MD4 of the sources); any stable
    # digest of the driver's name gives a fake tree the same shape.
    digest = hashlib.sha256(f"{spec.driver}/{spec.layout}".encode()).hexdigest().upper()[:24]
    defaults = {"version": _MODULE_VERSION.get(spec.layout, ""), "srcversion": digest}
    values: dict[str, str | None] = {
        key: defaults[key] for key in MODULE_VERSION_FILES[spec.layout]
    }
    values.update({"initstate": "live", "refcnt": "0", "taint": _MODULE_TAINT[spec.layout]})
    values.update(_MODULE_PARAMETERS)
    values.update(spec.module_attrs)
    return values
