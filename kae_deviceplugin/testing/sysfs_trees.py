"""The named fake sysfs trees (checked in under ``sysfs_fixtures/``) and large generated ones.

Each tree is documented in ``sysfs_fixtures/README.md``; change both together and rerun
``sysfs_fixtures/generate.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kae_deviceplugin.testing.sysfs_builder import (
    DeviceSpec,
    add_class_link,
    add_stray_class_file,
    build_tree,
    vf_address,
)

# Real Kunpeng 920 addresses: (driver, socket) -> (PF address, root port).
KUNPENG920_PFS: dict[tuple[str, int], tuple[str, str]] = {
    ("hisi_zip", 0): ("0000:75:00.0", "0000:74:00.0"),
    ("hisi_sec2", 0): ("0000:76:00.0", "0000:74:02.0"),
    ("hisi_hpre", 0): ("0000:79:00.0", "0000:78:00.0"),
    ("hisi_zip", 1): ("0000:b5:00.0", "0000:b4:00.0"),
    ("hisi_sec2", 1): ("0000:b6:00.0", "0000:b4:02.0"),
    ("hisi_hpre", 1): ("0000:b9:00.0", "0000:b8:00.0"),
}
SOCKET_NUMA_NODE = (0, 2)
# The order the real machine probed them in, which is the order uacce ids were handed out.
PROBE_ORDER: tuple[tuple[str, int], ...] = tuple(
    (driver, socket) for driver in ("hisi_sec2", "hisi_hpre", "hisi_zip") for socket in (0, 1)
)
QUEUES_PER_ENGINE = 1024
PF_QUEUES = 256  # the drivers' pf_q_num default; the rest is shared by the VFs
NO_MODULE_VERSION = {"version": None, "srcversion": None}


def kunpeng_pf(driver: str, socket: int, ident: int, domain: int = 0, **changes: Any) -> DeviceSpec:
    """The PF of ``driver`` on ``socket`` at its real address (another PCI domain if asked)."""
    address, port = KUNPENG920_PFS[(driver, socket)]
    spec = DeviceSpec(
        name=f"{driver}-{ident}",
        pci_address=f"{domain:04x}{address[4:]}",
        root_port=f"{domain:04x}{port[4:]}",
        numa_node=SOCKET_NUMA_NODE[socket],
    )
    return dataclasses.replace(spec, **changes)


def vf_of(pf: DeviceSpec, index: int, ident: int, **changes: Any) -> DeviceSpec:
    """VF ``index`` (0-based) of ``pf``, with the PF's layout, NUMA node and revision."""
    spec = DeviceSpec(
        name=f"{pf.driver}-{ident}",
        pci_address=vf_address(pf.pci_address, index),
        root_port=pf.root_port,
        numa_node=pf.numa_node,
        layout=pf.layout,
        parent_pf=pf.pci_address,
        revision=pf.revision,
    )
    return dataclasses.replace(spec, **changes)


def vf_queues(num_vfs: int) -> list[int]:
    """Queues of each VF when the PF keeps its share: even split, remainder to the last VF."""
    share, rest = divmod(QUEUES_PER_ENGINE - PF_QUEUES, num_vfs)
    return [share] * (num_vfs - 1) + [share + rest]


def with_vfs(pfs: list[DeviceSpec], vfs_per_pf: list[int]) -> list[DeviceSpec]:
    """``pfs`` followed by their VFs, numbered after the PFs in PF order (SR-IOV comes later)."""
    specs = list(pfs)
    ident = max((pf.minor for pf in pfs), default=-1) + 1
    for pf, count in zip(pfs, vfs_per_pf, strict=True):
        for index, queues in enumerate(vf_queues(count) if count else []):
            queue_attr = {"available_instances": str(queues)}
            specs.append(vf_of(pf, index, ident, attrs=queue_attr))
            ident += 1
    return specs


def two_socket(**changes: Any) -> list[DeviceSpec]:
    """The six PFs of a 2-socket Kunpeng 920, named as the real machine names them."""
    return [
        kunpeng_pf(driver, socket, ident, **changes)
        for ident, (driver, socket) in enumerate(PROBE_ORDER)
    ]


def one_socket(**changes: Any) -> list[DeviceSpec]:
    """Socket 0's three PFs, numbered in probe order."""
    drivers = [driver for driver, socket in PROBE_ORDER if socket == 0]
    return [kunpeng_pf(driver, 0, ident, **changes) for ident, driver in enumerate(drivers)]


def large_tree(count: int) -> list[DeviceSpec]:
    """``count`` devices: PFs spread over engines and both sockets, each with up to 63 VFs.

    Beyond six PFs the real addresses repeat in further PCI domains.
    """
    if count < 0:
        raise ValueError("count must not be negative")
    num_pfs = max(min(count, len(PROBE_ORDER)), -(-count // 64))
    pfs = []
    for slot in range(num_pfs):
        driver, socket = PROBE_ORDER[slot % len(PROBE_ORDER)]
        pfs.append(kunpeng_pf(driver, socket, slot, domain=slot // len(PROBE_ORDER)))
    per_pf, extra = divmod(count, num_pfs) if num_pfs else (0, 0)
    vfs = [per_pf - 1 + (1 if slot < extra else 0) for slot in range(num_pfs)]
    return with_vfs(pfs, vfs)


def _faults() -> list[DeviceSpec]:
    sec1 = kunpeng_pf("hisi_sec2", 1, 1, attrs={"available_instances": "abc"})
    return [
        kunpeng_pf("hisi_sec2", 0, 0, attrs={"isolate": "1"}),
        sec1,
        kunpeng_pf("hisi_hpre", 0, 2, attrs={"dev_state": "-1"}),
        kunpeng_pf("hisi_hpre", 1, 3, driver_bound=False),
        # Its module shows neither version nor srcversion: the driver version is unknown.
        kunpeng_pf("hisi_zip", 0, 4, dev_node=False, module_attrs=NO_MODULE_VERSION),
        kunpeng_pf("hisi_zip", 1, 5, attrs={"node_id": "-1"}, pci_attrs={"numa_node": ""}),
        vf_of(sec1, 0, 6, device_link=False, attrs={"available_instances": "768"}),
        DeviceSpec(
            name="hisi_foo-9",
            pci_address="0000:7b:00.0",
            root_port="0000:7a:00.0",
            numa_node=0,
            layout="mainline-isolate",
            attrs={"algorithms": "foo"},
        ),
    ]


def _fault_entries(root: Path) -> None:
    dangling = "../../devices/pci0000:78/0000:78:00.0/0000:79:00.1/uacce/hisi_hpre-7"
    add_class_link(root, "hisi_hpre-7", dangling)
    add_class_link(root, "hisi_zip-8", "hisi_zip-8")
    add_stray_class_file(root, "hisi_sec2-10")


def _empty_node(root: Path) -> None:
    # A node without the uacce module: other classes and devices exist, class/uacce does not.
    for sub in ("class", "devices", "bus"):
        (root / "sys" / sub).mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class NamedTree:
    """A checked-in tree: its devices, plus entries that are not devices (faults)."""

    devices: Callable[[], list[DeviceSpec]]
    extras: Callable[[Path], None] | None = None

    def build(self, root: Path) -> None:
        build_tree(root, self.devices())
        if self.extras is not None:
            self.extras(root)


TREES: dict[str, NamedTree] = {
    "kunpeng920-2p": NamedTree(two_socket),
    "kunpeng920-2p-vfs": NamedTree(lambda: with_vfs(two_socket(), [2] * len(PROBE_ORDER))),
    "mainline-6.6": NamedTree(lambda: one_socket(layout="mainline-isolate")),
    "mainline-5.10": NamedTree(lambda: one_socket(layout="mainline")),
    "kae1-4.19": NamedTree(lambda: two_socket(layout="kae1")),
    "kunpeng920-v3": NamedTree(lambda: two_socket(layout="mainline-isolate", revision="0x30")),
    "empty-node": NamedTree(list, _empty_node),
    "faults": NamedTree(_faults, _fault_entries),
}
