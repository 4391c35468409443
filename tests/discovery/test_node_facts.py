"""The node's KAE facts (issue 37) read from trees in the kernel's layouts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.absence import (
    DRIVER_NOT_LOADED,
    DRIVER_OTHER,
    DRIVER_UNBOUND,
    NO_LICENCE,
    NO_UACCE,
    NOT_PASSED_THROUGH,
    TEE_HOLDS_SEC,
)
from kae_deviceplugin.discovery.attributes import sva_of
from kae_deviceplugin.discovery.node_facts import (
    Cma,
    engine_sva,
    proc_root_for,
    read_cma,
    read_cpu,
    read_driver,
    read_node_facts,
)
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.sysfs_builder import DeviceSpec, build_tree, set_driver_bound
from kae_deviceplugin.testing.sysfs_trees import kunpeng_pf
from tests.support.fact_trees import FACT_TREES
from tests.support.node_cases import add_module
from tests.support.node_files import NodeSpec, add_node_files, set_meminfo

FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"
MIB = 1024 * 1024


def built(tmp_path: Path, name: str) -> tuple[Path, Inventory]:
    FACT_TREES[name](tmp_path)
    return tmp_path / "sys", scan(tmp_path / "sys", tmp_path / "dev")


def test_sva_follows_the_flags_of_each_kernel_family() -> None:
    """Mainline and openEuler 5.10+: bit 0 is SVA; openEuler 4.19 (attrs/): bit 0 is NOIOMMU
    and SVA is PASID + FAULT_FROM_DEV; an api ending in _noiommu never has SVA."""
    assert sva_of(129, "hisi_qm_v2", old_layout=False) is True
    assert sva_of(1, "hisi_qm_v2", old_layout=False) is True
    assert sva_of(128, "hisi_qm_v2", old_layout=False) is False
    assert sva_of(2, "hisi_qm_v2", old_layout=False) is False
    assert sva_of(1, "hisi_qm_v2_noiommu", old_layout=False) is False
    assert sva_of(None, "hisi_qm_v2", old_layout=False) is None
    assert sva_of(6, "hisi_qm_v2", old_layout=True) is True
    assert sva_of(1, "hisi_qm_v2", old_layout=True) is False  # NOIOMMU there
    assert sva_of(0, "hisi_qm_v2", old_layout=True) is False  # a shared domain, no PASID


def test_the_scan_gives_each_device_its_sva(tmp_path: Path) -> None:
    """The checked-in trees: KAE 2.0 (flags 129) and mainline (1) with SVA, KAE 1.x (0 under
    attrs/) without; under attrs/ flags 1 is NOIOMMU (no SVA) and 6 is SVA."""
    for tree, expected in (("kunpeng920-2p", True), ("mainline-6.6", True), ("kae1-4.19", False)):
        inventory = scan(FIXTURES / tree / "sys", FIXTURES / tree / "dev")
        assert {d.sva for d in inventory} == {expected}, tree
    kae1 = [
        kunpeng_pf("hisi_sec2", 0, 0, layout="kae1", attrs={"flags": "1"}),
        kunpeng_pf("hisi_hpre", 0, 1, layout="kae1", attrs={"flags": "6"}),
    ]
    build_tree(tmp_path, kae1)
    inventory = scan(tmp_path / "sys", tmp_path / "dev")
    assert {d.name: d.sva for d in inventory} == {"hisi_sec2-0": False, "hisi_hpre-1": True}


def test_a_node_without_sva_and_its_cma(tmp_path: Path) -> None:
    """SMMU off: every device without SVA, KAE's drivers in uacce_mode 2, CMA 64 MiB, 8 free."""
    sysfs, inventory = built(tmp_path, "no-sva-low-cma")
    facts = read_node_facts(sysfs, inventory)
    assert [d.sva for d in inventory] == [False] * 3
    assert len(facts.without_sva(inventory)) == 3
    assert (facts.cma.total, facts.cma.free) == (64 * MIB, 8 * MIB)
    sec = facts.drivers["sec"]
    assert (sec.provenance, sec.version, sec.uacce_mode, sec.pf_q_num) == (
        "out-of-tree",
        "2.0.2",
        2,
        256,
    )
    assert facts.cpu.hisilicon and facts.cpu.describe() == "HiSilicon Kunpeng 920"
    assert facts.absent == ()


def test_provenance_out_of_tree_in_tree_and_built_in(tmp_path: Path) -> None:
    """taint O: KAE's module; no O: the kernel's; no initstate and no taint: built in."""
    sysfs, inventory = built(tmp_path / "mixed", "mixed-provenance")
    facts = read_node_facts(sysfs, inventory)
    provenance = {name: d.provenance for name, d in facts.drivers.items()}
    assert provenance == {"hpre": "out-of-tree", "sec": "out-of-tree", "zip": "in-tree"}
    sysfs, inventory = built(tmp_path / "builtin", "built-in")
    assert {d.provenance for d in read_node_facts(sysfs, inventory).drivers.values()} == {
        "built-in"
    }
    mainline = read_driver(FIXTURES / "mainline-6.6" / "sys", "hisi_sec2")
    assert (mainline.provenance, mainline.version, mainline.srcversion) == ("in-tree", None, None)
    assert not read_driver(FIXTURES / "empty-node" / "sys", "hisi_sec2").loaded


def test_a_single_socket_kunpeng_without_sec_likely_has_tee_holding_it(tmp_path: Path) -> None:
    """HPRE and ZIP on one socket, no SEC function: TEE likely holds it; on two sockets the
    same absence is put down to the licence instead."""
    sysfs, inventory = built(tmp_path / "one", "single-socket-without-sec")
    (absence,) = read_node_facts(sysfs, inventory).absent
    assert (absence.engine, absence.cause) == ("sec", TEE_HOLDS_SEC)
    assert absence.detail.startswith("likely") and "BIOS" in absence.fixes[0]
    two = tmp_path / "two"
    build_tree(two, [kunpeng_pf("hisi_hpre", 0, 0), kunpeng_pf("hisi_hpre", 1, 1)])
    add_node_files(two, NodeSpec(sockets=2))
    absent = read_node_facts(two / "sys", scan(two / "sys", two / "dev")).absent
    assert {(a.engine, a.cause) for a in absent} == {("sec", NO_LICENCE), ("zip", NO_LICENCE)}


def test_a_kunpeng_without_engines_likely_lacks_the_licence(tmp_path: Path) -> None:
    """No engine function on the bus (the SoC's NIC is): each engine's likely cause is the
    licence."""
    sysfs, inventory = built(tmp_path, "no-licence")
    absent = read_node_facts(sysfs, inventory).absent
    assert [(a.engine, a.cause) for a in absent] == [
        ("hpre", NO_LICENCE),
        ("sec", NO_LICENCE),
        ("zip", NO_LICENCE),
    ]
    assert all(a.detail.startswith("likely") for a in absent)


def test_an_engine_on_the_bus_without_its_driver(tmp_path: Path) -> None:
    """ZIP PFs present, hisi_zip not loaded; then loaded but unbound; then held by vfio-pci;
    then bound with uacce_mode=0."""
    sysfs, inventory = built(tmp_path, "engine-without-driver")

    def cause() -> tuple[str, str]:
        (absence,) = read_node_facts(sysfs, inventory).absent
        return absence.cause, absence.fixes[0]

    assert cause() == (
        DRIVER_NOT_LOADED,
        "on the node: modprobe hisi_zip (openEuler's KAE driver packages provide it)",
    )
    add_module(tmp_path, "hisi_zip", {"uacce_mode": "0"})
    (tmp_path / "sys" / "module" / "hisi_zip" / "initstate").write_text("live\n")
    assert cause()[0] == DRIVER_UNBOUND
    set_driver_bound(tmp_path, "0000:75:00.0", True, "vfio-pci")
    assert cause()[0] == DRIVER_OTHER
    for address in ("0000:75:00.0", "0000:b5:00.0"):
        set_driver_bound(tmp_path, address, True, "hisi_zip")
    assert cause()[0] == NO_UACCE and "uacce_mode=1" in cause()[1]


def test_a_vm_with_vfs_of_one_engine_was_given_no_other(tmp_path: Path) -> None:
    """A Kunpeng VM sees the SEC VF passed to it (behind a QEMU root port, no physfn, no
    sriov files) and no PF: the other engines were likely not passed through."""
    vf = DeviceSpec(
        name="hisi_sec2-0",
        pci_address="0000:01:00.0",
        root_port="0000:00:01.0",
        numa_node=0,
        pci_attrs={"device": "0xa256", "sriov_totalvfs": None, "sriov_numvfs": None},
    )
    build_tree(tmp_path, [vf])
    add_node_files(tmp_path, NodeSpec(sockets=1))
    inventory = scan(tmp_path / "sys", tmp_path / "dev")
    assert [d.function.value for d in inventory] == ["vf"]
    absent = read_node_facts(tmp_path / "sys", inventory).absent
    assert {(a.engine, a.cause) for a in absent} == {
        ("hpre", NOT_PASSED_THROUGH),
        ("zip", NOT_PASSED_THROUGH),
    }


def test_other_cpus_get_no_cause_for_an_absent_engine(tmp_path: Path) -> None:
    """An x86 node (no MIDR, cpuinfo without implementer) with a stray SEC: nothing is said
    about HPRE and ZIP; the CPU comes from cpuinfo when sysfs shows no MIDR_EL1."""
    build_tree(tmp_path, [kunpeng_pf("hisi_sec2", 0, 0)])
    add_node_files(tmp_path, NodeSpec(midr=None))
    sysfs = tmp_path / "sys"
    facts = read_node_facts(sysfs, scan(sysfs, tmp_path / "dev"))
    assert facts.absent == () and not facts.cpu.hisilicon
    midr = sysfs / "devices" / "system" / "cpu" / "cpu0" / "regs" / "identification" / "midr_el1"
    add_node_files(tmp_path, NodeSpec())
    midr.unlink()  # an arm64 kernel before MIDR_EL1 was in sysfs: /proc/cpuinfo says it
    cpu = read_cpu(sysfs, proc_root_for(sysfs))
    assert (cpu.implementer, cpu.part) == (0x48, 0xD01)


def test_absent_files_are_unknown_facts_never_errors(tmp_path: Path) -> None:
    """No /proc, no module directory, no CPU directory, an unreadable meminfo: all unknown."""
    for tree in ("empty-node", "mainline-5.10", "kae1-4.19", "faults"):
        sysfs = FIXTURES / tree / "sys"
        facts = read_node_facts(sysfs, scan(sysfs, FIXTURES / tree / "dev"))
        assert facts.cma.total is None and facts.cpu.implementer is None
        assert facts.absent == ()  # not a HiSilicon CPU as far as the tree shows
    (tmp_path / "proc" / "meminfo").mkdir(parents=True)  # a directory: unreadable
    assert read_cma(tmp_path / "proc").total is None
    add_node_files(tmp_path / "nocma", NodeSpec(cma_total_kib=None))  # no CONFIG_CMA
    assert read_cma(tmp_path / "nocma" / "proc") == read_cma(tmp_path / "none") == Cma()


def test_cma_is_read_as_it_changes(tmp_path: Path) -> None:
    """CmaFree is read afresh on each call (the metrics and doctor read it when asked)."""
    add_node_files(tmp_path, NodeSpec())
    assert read_cma(tmp_path / "proc").free == 60 * MIB
    set_meminfo(tmp_path, NodeSpec(cma_free_kib=1024))
    assert read_cma(tmp_path / "proc").free == 1 * MIB


@pytest.mark.parametrize(
    ("values", "expected"), [((True, True), "true"), ((False,), "false"), ((True, False), "mixed")]
)
def test_engine_sva_summary(values: tuple[bool, ...], expected: str) -> None:
    """An engine's devices agree (true, false) or not (mixed); unknown ones do not count."""
    first = scan(FIXTURES / "kunpeng920-2p" / "sys", FIXTURES / "kunpeng920-2p" / "dev").devices[0]
    devices = [dataclasses.replace(first, sva=v) for v in (*values, None)]
    assert engine_sva(devices) == expected
    assert engine_sva([dataclasses.replace(first, sva=None)]) is None
