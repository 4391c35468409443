"""Nodes that tell the node's KAE facts apart (issue 37), built in a test's directory.

Each is a Kunpeng 920 in the kernel's layout (devices through
:mod:`kae_deviceplugin.testing.sysfs_builder`, CPUs and ``/proc`` through
:mod:`tests.support.node_files`, bare PCI functions through
:mod:`tests.support.node_cases`):

* ``no-sva-low-cma``: one socket, SMMU off: the three PFs without SVA (``flags`` 2, ``api``
  ``hisi_qm_v2_noiommu``, KAE's drivers loaded with ``uacce_mode=2``), CMA 64 MiB with 8 free.
* ``no-sva-enough-cma``: the same with 512 MiB of CMA, 400 free.
* ``single-socket-without-sec``: one socket, HPRE and ZIP, no SEC function on the bus.
* ``engine-without-driver``: two sockets, HPRE and SEC serving, both ZIP PFs on the bus with no
  driver bound and ``hisi_zip`` not loaded.
* ``no-licence``: two sockets, no engine on the bus, the SoC's own NIC (19e5:a222) is.
* ``mixed-provenance``: the two-socket node with KAE's HPRE and SEC drivers beside the kernel's
  own ``hisi_zip`` (no taint, no version).
* ``built-in``: the two-socket node on a kernel with the three drivers built in (no
  ``initstate``, ``refcnt``, ``taint``; parameters only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from kae_deviceplugin.core.engines import ENGINES_BY_NAME, HUAWEI_PCI_VENDOR
from kae_deviceplugin.testing.sysfs_builder import DeviceSpec, build_tree
from kae_deviceplugin.testing.sysfs_trees import (
    KUNPENG920_PFS,
    kunpeng_pf,
    one_socket,
    two_socket,
)
from tests.support.node_cases import add_pci_function
from tests.support.node_files import KIB_PER_MIB, NodeSpec, add_node_files

NO_SVA = {"flags": "2", "api": "hisi_qm_v2_noiommu"}
KAE_NO_SVA_MODULE = {"parameters/uacce_mode": "2"}
IN_TREE_MODULE: dict[str, str | None] = {"taint": "\n", "version": None, "srcversion": None}
BUILT_IN_MODULE: dict[str, str | None] = {"initstate": None, "refcnt": None, "taint": None}
HNS3_NIC = ("0000:7d:00.0", "0000:7c:00.0", "0xa222")  # the SoC's on-chip Ethernet


def _node(root: Path, devices: list[DeviceSpec], spec: NodeSpec) -> None:
    build_tree(root, devices)
    add_node_files(root, spec)


def _no_sva(root: Path, cma_total_mib: int, cma_free_mib: int) -> None:
    devices = one_socket(attrs=NO_SVA, module_attrs=KAE_NO_SVA_MODULE)
    spec = NodeSpec(
        sockets=1,
        cma_total_kib=cma_total_mib * KIB_PER_MIB,
        cma_free_kib=cma_free_mib * KIB_PER_MIB,
    )
    _node(root, devices, spec)


def no_sva_low_cma(root: Path) -> None:
    _no_sva(root, 64, 8)


def no_sva_enough_cma(root: Path) -> None:
    _no_sva(root, 512, 400)


def single_socket_without_sec(root: Path) -> None:
    devices = [kunpeng_pf("hisi_hpre", 0, 0), kunpeng_pf("hisi_zip", 0, 1)]
    _node(root, devices, NodeSpec(sockets=1))


def engine_without_driver(root: Path) -> None:
    devices = [d for d in two_socket() if d.driver != "hisi_zip"]
    _node(root, devices, NodeSpec(sockets=2))
    zip_pf = ENGINES_BY_NAME["zip"].pf_device_id
    for (driver, _socket), (address, port) in sorted(KUNPENG920_PFS.items()):
        if driver == "hisi_zip":
            add_pci_function(root, address, port, HUAWEI_PCI_VENDOR, zip_pf)


def no_licence(root: Path) -> None:
    for sub in ("class", "devices", "bus"):
        (root / "sys" / sub).mkdir(parents=True, exist_ok=True)
    (root / "dev").mkdir(parents=True, exist_ok=True)
    address, port, device = HNS3_NIC
    add_pci_function(root, address, port, HUAWEI_PCI_VENDOR, device)
    add_node_files(root, NodeSpec(sockets=2))


def _two_socket_with(module_attrs: dict[str, dict[str, str | None]]) -> Callable[[Path], None]:
    def build(root: Path) -> None:
        devices = [
            dataclasses.replace(d, module_attrs=module_attrs.get(d.driver, {}))
            for d in two_socket()
        ]
        _node(root, devices, NodeSpec(sockets=2))

    return build


FACT_TREES: dict[str, Callable[[Path], None]] = {
    "no-sva-low-cma": no_sva_low_cma,
    "no-sva-enough-cma": no_sva_enough_cma,
    "single-socket-without-sec": single_socket_without_sec,
    "engine-without-driver": engine_without_driver,
    "no-licence": no_licence,
    "mixed-provenance": _two_socket_with({"hisi_zip": IN_TREE_MODULE}),
    "built-in": _two_socket_with(
        dict.fromkeys(("hisi_hpre", "hisi_sec2", "hisi_zip"), BUILT_IN_MODULE)
    ),
}
