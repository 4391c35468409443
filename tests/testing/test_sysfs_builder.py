"""The fake sysfs builder lays trees out as the kernel does; the checked-in trees are current."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.testing.sysfs_builder import (
    LAYOUTS,
    DeviceSpec,
    add_class_link,
    add_dev_node,
    add_device,
    add_stray_class_file,
    build_tree,
    find_function_dir,
    find_uacce_dir,
    remove_dev_node,
    remove_device,
    set_attribute,
    set_driver_bound,
    set_pci_attribute,
    vf_address,
)
from kae_deviceplugin.testing.sysfs_trees import TREES, kunpeng_pf, large_tree, vf_of, with_vfs

REPO = Path(__file__).resolve().parents[2]
GENERATE = REPO / "sysfs_fixtures" / "generate.py"
FIXTURES = REPO / "sysfs_fixtures"

# FACTS.md section 3: the six devices of a real 2-socket Kunpeng 920.
REAL_DEVICES = {
    "hisi_sec2-0": ("0000:76:00.0", 0),
    "hisi_sec2-1": ("0000:b6:00.0", 2),
    "hisi_hpre-2": ("0000:79:00.0", 0),
    "hisi_hpre-3": ("0000:b9:00.0", 2),
    "hisi_zip-4": ("0000:75:00.0", 0),
    "hisi_zip-5": ("0000:b5:00.0", 2),
}


def _read(path: Path) -> str:
    return path.read_text()


def _class_entry(root: Path, name: str) -> Path:
    return root / "sys" / "class" / "uacce" / name


def _hpre(**changes: Any) -> DeviceSpec:
    return kunpeng_pf("hisi_hpre", 0, 2, **changes)


def _run_generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATE), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )


@pytest.fixture
def real_2p(tmp_path: Path) -> Path:
    TREES["kunpeng920-2p"].build(tmp_path)
    return tmp_path


def test_real_machine_example_path_is_reproduced(real_2p: Path) -> None:
    """The class link of hisi_hpre-2 reads exactly as on the real machine in FACTS.md."""
    link = _class_entry(real_2p, "hisi_hpre-2")
    expected = "../../devices/pci0000:78/0000:78:00.0/0000:79:00.0/uacce/hisi_hpre-2"
    assert os.readlink(link) == expected


def test_kunpeng920_2p_holds_exactly_the_six_real_devices(real_2p: Path) -> None:
    """Names, PCI addresses and NUMA nodes (PCI numa_node and node_id) match the real machine."""
    names = sorted(p.name for p in (real_2p / "sys" / "class" / "uacce").iterdir())
    assert names == sorted(REAL_DEVICES)
    for name, (address, node) in REAL_DEVICES.items():
        udir = _class_entry(real_2p, name).resolve()
        assert udir.parent.parent.name == address
        assert _read(udir / "device" / "numa_node") == f"{node}\n"
        assert _read(udir / "node_id") == f"{node}\n"
        assert (real_2p / "dev" / name).is_file()


@pytest.mark.parametrize("name", sorted(REAL_DEVICES))
def test_class_entry_is_relative_link_to_device_dir_under_pci_function(
    real_2p: Path, name: str
) -> None:
    """class/uacce/<name> is relative and lands on <root complex>/<root port>/<bdf>/uacce/<name>."""
    link = _class_entry(real_2p, name)
    assert link.is_symlink()
    assert not os.readlink(link).startswith("/")
    udir = link.resolve()
    address = REAL_DEVICES[name][0]
    rel = udir.relative_to(real_2p.resolve() / "sys" / "devices").parts
    assert rel[0] == f"pci{address[:4]}:{rel[1][5:7]}"
    assert rel[1][:7] == rel[0][3:]
    assert rel[2:] == (address, "uacce", name)


@pytest.mark.parametrize("name", sorted(REAL_DEVICES))
def test_device_and_subsystem_links_read_as_the_kernel_writes_them(
    real_2p: Path, name: str
) -> None:
    """``device`` is ../../../<bdf> (not ../..) and ``subsystem`` resolves to class/uacce."""
    udir = find_uacce_dir(real_2p, name)
    address = REAL_DEVICES[name][0]
    assert os.readlink(udir / "device") == f"../../../{address}"
    assert (udir / "device").resolve() == udir.parent.parent.resolve()
    assert os.readlink(udir / "subsystem") == "../../../../../../class/uacce"
    assert (udir / "subsystem").resolve() == (real_2p / "sys" / "class" / "uacce").resolve()


def test_dev_and_uevent_carry_the_minor_of_the_name(real_2p: Path) -> None:
    """``dev`` is <major>:<id> and ``uevent`` names the same minor and DEVNAME."""
    udir = find_uacce_dir(real_2p, "hisi_zip-5")
    major, minor = _read(udir / "dev").strip().split(":")
    assert minor == "5"
    uevent = _read(udir / "uevent").splitlines()
    assert uevent == [f"MAJOR={major}", "MINOR=5", "DEVNAME=hisi_zip-5"]


def test_pci_function_attributes_follow_the_engine_table(real_2p: Path) -> None:
    """vendor, PF device ID, revision and numa_node of each function, newline-terminated."""
    for engine in ENGINES:
        for name in (n for n in REAL_DEVICES if n.startswith(engine.driver + "-")):
            fn = find_function_dir(real_2p, REAL_DEVICES[name][0])
            assert _read(fn / "vendor") == "0x19e5\n"
            assert _read(fn / "device") == engine.pf_device_id + "\n"
            assert _read(fn / "revision") == "0x21\n"
            assert _read(fn / "sriov_totalvfs") == "63\n"
            assert _read(fn / "sriov_numvfs") == "0\n"
            uacce = find_uacce_dir(real_2p, name)
            assert _read(uacce / "algorithms").splitlines() == list(engine.algorithms)


def test_driver_link_and_back_link(real_2p: Path) -> None:
    """``driver`` resolves to bus/pci/drivers/<driver>, which links back to the function."""
    fn = find_function_dir(real_2p, "0000:79:00.0")
    assert os.readlink(fn / "driver") == "../../../../bus/pci/drivers/hisi_hpre"
    driver_dir = real_2p / "sys" / "bus" / "pci" / "drivers" / "hisi_hpre"
    assert (fn / "driver").resolve() == driver_dir.resolve()
    assert (driver_dir / "0000:79:00.0").resolve() == fn.resolve()


def test_unbinding_and_rebinding_the_driver(real_2p: Path) -> None:
    """set_driver_bound removes the link both ways and restores them, naming the driver itself."""
    fn = find_function_dir(real_2p, "0000:b9:00.0")
    back = real_2p / "sys" / "bus" / "pci" / "drivers" / "hisi_hpre" / "0000:b9:00.0"
    set_driver_bound(real_2p, "0000:b9:00.0", False)
    assert not (fn / "driver").is_symlink()
    assert not back.is_symlink()
    set_driver_bound(real_2p, "0000:b9:00.0", True)
    assert (fn / "driver").resolve().name == "hisi_hpre"
    assert back.resolve() == fn.resolve()


def test_vf_addresses_fill_functions_then_devices() -> None:
    """VFs take functions 1..7 of the PF's device, then the next device numbers, up to 63."""
    pf = "0000:79:00.0"
    assert [vf_address(pf, i) for i in range(8)] == [
        "0000:79:00.1",
        "0000:79:00.2",
        "0000:79:00.3",
        "0000:79:00.4",
        "0000:79:00.5",
        "0000:79:00.6",
        "0000:79:00.7",
        "0000:79:01.0",
    ]
    assert vf_address(pf, 62) == "0000:79:07.7"
    with pytest.raises(ValueError):
        vf_address(pf, 63)


def test_vfs_are_siblings_linked_to_their_pf(tmp_path: Path) -> None:
    """physfn resolves to the PF, virtfnN to the VF, sriov_numvfs counts them, IDs are VF IDs."""
    TREES["kunpeng920-2p-vfs"].build(tmp_path)
    pf = find_function_dir(tmp_path, "0000:79:00.0")
    assert _read(pf / "sriov_numvfs") == "2\n"
    for index, address in enumerate(("0000:79:00.1", "0000:79:00.2")):
        vf = find_function_dir(tmp_path, address)
        assert vf.parent == pf.parent
        assert os.readlink(vf / "physfn") == "../0000:79:00.0"
        assert (vf / "physfn").resolve() == pf.resolve()
        assert (pf / f"virtfn{index}").resolve() == vf.resolve()
        assert _read(vf / "device") == "0xa259\n"
        assert not (vf / "sriov_totalvfs").exists()
        (uacce,) = (vf / "uacce").iterdir()
        assert _read(uacce / "available_instances") == "384\n"
    hpre_pf_uacce = find_uacce_dir(tmp_path, "hisi_hpre-2")
    assert _read(hpre_pf_uacce / "available_instances") == "256\n"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_each_layout_shows_its_attribute_files(tmp_path: Path, layout: str) -> None:
    """A device shows exactly its layout's attributes; kae1 puts them all under attrs/."""
    build_tree(tmp_path, [_hpre(layout=layout)])
    udir = find_uacce_dir(tmp_path, "hisi_hpre-2")
    attr_dir = udir / "attrs" if layout == "kae1" else udir
    core = {"dev", "uevent", "device", "subsystem"} | ({"attrs"} if layout == "kae1" else set())
    assert {p.name for p in udir.iterdir()} - core == (
        set() if layout == "kae1" else set(LAYOUTS[layout])
    )
    assert {p.name for p in attr_dir.iterdir()} - core == set(LAYOUTS[layout])
    for name in LAYOUTS[layout]:
        assert _read(attr_dir / name).endswith("\n")


def test_layout_families_differ_as_the_kernels_do() -> None:
    """mainline lacks isolate, 6.2 adds it, KAE 2.0 adds node_id/dev_state, KAE 1.x no region_*."""
    assert "isolate" not in LAYOUTS["mainline"]
    assert set(LAYOUTS["mainline-isolate"]) == {*LAYOUTS["mainline"], "isolate", "isolate_strategy"}
    assert set(LAYOUTS["kae2"]) == {
        *LAYOUTS["mainline-isolate"],
        "node_id",
        "numa_distance",
        "dev_state",
    }
    assert not any(name.startswith("region_") for name in LAYOUTS["kae1"])
    assert {"id", "qfrs_offset", "node_id"} <= set(LAYOUTS["kae1"])


def test_default_values_per_layout_and_revision(tmp_path: Path) -> None:
    """KAE 2.0 flags are 129, mainline flags 1, and revision 0x30 (V3) implies api hisi_qm_v3."""
    build_tree(
        tmp_path,
        [
            _hpre(),
            kunpeng_pf("hisi_zip", 0, 4, layout="mainline"),
            kunpeng_pf("hisi_sec2", 0, 0, layout="mainline-isolate", revision="0x30"),
        ],
    )
    assert _read(find_uacce_dir(tmp_path, "hisi_hpre-2") / "flags") == "129\n"
    assert _read(find_uacce_dir(tmp_path, "hisi_hpre-2") / "api") == "hisi_qm_v2\n"
    assert _read(find_uacce_dir(tmp_path, "hisi_zip-4") / "flags") == "1\n"
    assert _read(find_uacce_dir(tmp_path, "hisi_sec2-0") / "api") == "hisi_qm_v3\n"
    assert _read(find_function_dir(tmp_path, "0000:76:00.0") / "revision") == "0x30\n"


def test_overrides_replace_remove_and_add_files(tmp_path: Path) -> None:
    """A string override is written with a newline, None leaves the file out, "" stays empty."""
    spec = _hpre(
        attrs={"flags": "2", "api": "hisi_qm_v2_noiommu", "isolate": None, "extra": "x\n"},
        pci_attrs={"numa_node": "", "revision": None},
    )
    build_tree(tmp_path, [spec])
    udir = find_uacce_dir(tmp_path, "hisi_hpre-2")
    fn = find_function_dir(tmp_path, "0000:79:00.0")
    assert _read(udir / "flags") == "2\n"
    assert _read(udir / "api") == "hisi_qm_v2_noiommu\n"
    assert _read(udir / "extra") == "x\n"
    assert not (udir / "isolate").exists()
    assert _read(fn / "numa_node") == ""
    assert not (fn / "revision").exists()


def test_spec_flags_leave_out_driver_dev_node_and_device_link(tmp_path: Path) -> None:
    """driver_bound, dev_node and device_link False leave out the link, the node, the link."""
    build_tree(tmp_path, [_hpre(driver_bound=False, dev_node=False, device_link=False)])
    fn = find_function_dir(tmp_path, "0000:79:00.0")
    udir = find_uacce_dir(tmp_path, "hisi_hpre-2")
    assert not (fn / "driver").is_symlink()
    assert not (tmp_path / "dev" / "hisi_hpre-2").exists()
    assert not (udir / "device").is_symlink()
    assert _class_entry(tmp_path, "hisi_hpre-2").resolve() == udir.resolve()


def test_isolate_of_a_pf_is_what_its_vfs_read(tmp_path: Path) -> None:
    """As in the kernel (one flag per PF), a PF's isolate written shows in its VFs' isolate;
    a VF's own write and other attributes stay with the device written."""
    build_tree(tmp_path, [_hpre(), vf_of(_hpre(), 0, 9), vf_of(_hpre(), 1, 10)])
    set_attribute(tmp_path, "hisi_hpre-2", "isolate", "1")
    for name in ("hisi_hpre-2", "hisi_hpre-9", "hisi_hpre-10"):
        assert _read(find_uacce_dir(tmp_path, name) / "isolate") == "1\n"
    set_attribute(tmp_path, "hisi_hpre-2", "dev_state", "-1")
    assert _read(find_uacce_dir(tmp_path, "hisi_hpre-9") / "dev_state") == "0\n"
    set_attribute(tmp_path, "hisi_hpre-9", "isolate", "0")
    assert _read(find_uacce_dir(tmp_path, "hisi_hpre-10") / "isolate") == "1\n"


def test_set_attribute_replaces_atomically_and_removes(tmp_path: Path) -> None:
    """set_attribute swaps the file in whole (no temp file left), and None removes it."""
    build_tree(tmp_path, [_hpre()])
    udir = find_uacce_dir(tmp_path, "hisi_hpre-2")
    set_attribute(tmp_path, "hisi_hpre-2", "isolate", "1")
    assert _read(udir / "isolate") == "1\n"
    set_attribute(tmp_path, "hisi_hpre-2", "available_instances", None)
    assert not (udir / "available_instances").exists()
    assert not [p for p in udir.iterdir() if p.name.endswith(".tmp")]


def test_set_attribute_finds_attrs_subdirectory_of_kae1(tmp_path: Path) -> None:
    """On a KAE 1.x device the attribute is written under attrs/, not beside it."""
    build_tree(tmp_path, [_hpre(layout="kae1")])
    set_attribute(tmp_path, "hisi_hpre-2", "available_instances", "0")
    udir = find_uacce_dir(tmp_path, "hisi_hpre-2")
    assert _read(udir / "attrs" / "available_instances") == "0\n"
    assert not (udir / "available_instances").exists()


def test_set_pci_attribute(tmp_path: Path) -> None:
    """PCI function attributes can be changed and removed at runtime."""
    build_tree(tmp_path, [_hpre()])
    set_pci_attribute(tmp_path, "0000:79:00.0", "numa_node", "-1")
    fn = find_function_dir(tmp_path, "0000:79:00.0")
    assert _read(fn / "numa_node") == "-1\n"
    set_pci_attribute(tmp_path, "0000:79:00.0", "numa_node", None)
    assert not (fn / "numa_node").exists()


def test_dev_node_removal_and_return(tmp_path: Path) -> None:
    """remove_dev_node and add_dev_node toggle only the /dev entry."""
    build_tree(tmp_path, [_hpre()])
    remove_dev_node(tmp_path, "hisi_hpre-2")
    assert not (tmp_path / "dev" / "hisi_hpre-2").exists()
    assert _class_entry(tmp_path, "hisi_hpre-2").exists()
    add_dev_node(tmp_path, "hisi_hpre-2")
    assert (tmp_path / "dev" / "hisi_hpre-2").is_file()


def test_remove_device_keeps_the_pci_function_and_allows_a_new_name(tmp_path: Path) -> None:
    """Removal drops class link, device dir and node; re-probing may reuse the function."""
    build_tree(tmp_path, [_hpre()])
    remove_device(tmp_path, "hisi_hpre-2")
    assert not _class_entry(tmp_path, "hisi_hpre-2").is_symlink()
    assert not (tmp_path / "dev" / "hisi_hpre-2").exists()
    fn = find_function_dir(tmp_path, "0000:79:00.0")
    assert list((fn / "uacce").iterdir()) == []
    add_device(tmp_path, kunpeng_pf("hisi_hpre", 0, 7))
    assert _class_entry(tmp_path, "hisi_hpre-7").resolve().parent.parent == fn.resolve()


def test_removing_a_vf_function_updates_its_pf(tmp_path: Path) -> None:
    """With remove_function a VF disappears from the PF's virtfn links and sriov_numvfs."""
    pf = _hpre()
    build_tree(tmp_path, with_vfs([pf], [2]))
    pf_dir = find_function_dir(tmp_path, pf.pci_address)
    with pytest.raises(ValueError):
        remove_device(tmp_path, "hisi_hpre-2", remove_function=True)
    assert _class_entry(tmp_path, "hisi_hpre-2").is_symlink()  # refused before touching it
    remove_device(tmp_path, "hisi_hpre-3", remove_function=True)
    assert _read(pf_dir / "sriov_numvfs") == "1\n"
    assert not (pf_dir / "virtfn0").is_symlink()
    assert (pf_dir / "virtfn1").resolve().name == "0000:79:00.2"
    with pytest.raises(FileNotFoundError):
        find_function_dir(tmp_path, "0000:79:00.1")
    assert not (tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:79:00.1").is_symlink()


def test_adding_a_vf_needs_its_pf_under_the_same_root_port(tmp_path: Path) -> None:
    """A VF whose PF is not there is refused rather than half-built."""
    build_tree(tmp_path, [])
    with pytest.raises(ValueError):
        add_device(tmp_path, vf_of(_hpre(), 0, 9))


def test_fault_entry_helpers(tmp_path: Path) -> None:
    """Dangling link, link loop and stray file look to a scanner as they would on a broken node."""
    build_tree(tmp_path, [])
    add_class_link(tmp_path, "hisi_hpre-7", "../../devices/nowhere/hisi_hpre-7")
    add_class_link(tmp_path, "hisi_zip-8", "hisi_zip-8")
    add_stray_class_file(tmp_path, "hisi_sec2-10", "junk")
    dangling = _class_entry(tmp_path, "hisi_hpre-7")
    assert dangling.is_symlink() and not dangling.exists()
    with pytest.raises(OSError) as loop:
        os.stat(_class_entry(tmp_path, "hisi_zip-8"))
    assert loop.value.errno == errno.ELOOP
    stray = _class_entry(tmp_path, "hisi_sec2-10")
    assert stray.is_file() and not stray.is_symlink()


def test_faults_tree_holds_each_documented_fault(tmp_path: Path) -> None:
    """Every fault of the README is present in the faults tree, one per entry."""
    TREES["faults"].build(tmp_path)

    def read(name: str, attr: str) -> str:
        return _read(find_uacce_dir(tmp_path, name) / attr)

    assert read("hisi_sec2-0", "isolate") == "1\n"
    assert read("hisi_sec2-1", "available_instances") == "abc\n"
    assert read("hisi_hpre-2", "dev_state") == "-1\n"
    assert not (find_function_dir(tmp_path, "0000:b9:00.0") / "driver").is_symlink()
    assert not (tmp_path / "dev" / "hisi_zip-4").exists()
    assert read("hisi_zip-5", "node_id") == "-1\n"
    assert _read(find_function_dir(tmp_path, "0000:b5:00.0") / "numa_node") == ""
    assert not (find_uacce_dir(tmp_path, "hisi_sec2-6") / "device").is_symlink()
    assert _class_entry(tmp_path, "hisi_hpre-7").is_symlink()
    assert not _class_entry(tmp_path, "hisi_hpre-7").exists()
    assert os.readlink(_class_entry(tmp_path, "hisi_zip-8")) == "hisi_zip-8"
    assert not _class_entry(tmp_path, "hisi_sec2-10").is_symlink()
    assert _class_entry(tmp_path, "hisi_foo-9").resolve().is_dir()
    healthy = ("isolate", "dev_state")
    assert [read("hisi_zip-5", attr) for attr in healthy] == ["0\n", "0\n"]


def test_mainline_trees_take_numa_from_the_pci_function(tmp_path: Path) -> None:
    """mainline-6.6 has isolate but no node_id; mainline-5.10 has neither."""
    TREES["mainline-6.6"].build(tmp_path / "a")
    TREES["mainline-5.10"].build(tmp_path / "b")
    new = find_uacce_dir(tmp_path / "a", "hisi_hpre-1")
    old = find_uacce_dir(tmp_path / "b", "hisi_hpre-1")
    assert not (new / "node_id").exists()
    assert _read(new / "isolate") == "0\n"
    assert _read(new / "device" / "numa_node") == "0\n"
    assert not (old / "isolate").exists()


def test_empty_node_has_no_uacce_class(tmp_path: Path) -> None:
    """The empty-node tree has sys/ and dev/ but no class/uacce directory at all."""
    TREES["empty-node"].build(tmp_path)
    assert (tmp_path / "sys" / "class").is_dir()
    assert (tmp_path / "dev").is_dir()
    assert not (tmp_path / "sys" / "class" / "uacce").exists()


@pytest.mark.parametrize("count", [0, 1, 6, 10, 64 * 6, 1000])
def test_large_tree_spreads_devices(count: int) -> None:
    """large_tree(n) yields n unique devices over engines and NUMA nodes, <= 63 VFs per PF."""
    specs = large_tree(count)
    assert len(specs) == count
    assert len({s.name for s in specs}) == count
    assert len({s.pci_address for s in specs}) == count
    assert sorted(s.minor for s in specs) == list(range(count))
    per_pf: dict[str, int] = {}
    for spec in specs:
        if spec.parent_pf is not None:
            per_pf[spec.parent_pf] = per_pf.get(spec.parent_pf, 0) + 1
    assert all(n <= 63 for n in per_pf.values())
    if count >= 6:
        assert {s.driver for s in specs} == {e.driver for e in ENGINES}
        assert {s.numa_node for s in specs} == {0, 2}


def test_large_tree_builds_consistently(tmp_path: Path) -> None:
    """A built large tree has a class link and /dev node per device and consistent VF counts."""
    specs = large_tree(70)
    build_tree(tmp_path, specs)
    assert len(list((tmp_path / "sys" / "class" / "uacce").iterdir())) == 70
    assert len(list((tmp_path / "dev").iterdir())) == 70
    for pf in (s for s in specs if s.parent_pf is None):
        fn = find_function_dir(tmp_path, pf.pci_address)
        vfs = sum(1 for s in specs if s.parent_pf == pf.pci_address)
        assert _read(fn / "sriov_numvfs") == f"{vfs}\n"


def test_spec_rejects_malformed_values() -> None:
    """Names must be <driver>-<id>, layouts known, addresses dddd:bb:dd.f."""
    with pytest.raises(ValueError):
        _hpre(name="hisi_hpre")
    with pytest.raises(ValueError):
        _hpre(layout="kae3")
    with pytest.raises(ValueError):
        _hpre(pci_address="79:00.0")


def test_checked_in_trees_are_current() -> None:
    """generate.py --check passes: the checked-in trees are what the builder writes today."""
    result = _run_generate("--check")
    assert result.returncode == 0, result.stderr


def test_check_names_every_kind_of_difference(tmp_path: Path) -> None:
    """--check fails on a changed file, a changed link, an extra path and a missing path."""
    copy = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, copy, symlinks=True)
    tree = copy / "kunpeng920-2p"
    udir = find_uacce_dir(tree, "hisi_hpre-2")
    (udir / "isolate").write_text("1\n")
    (udir / "device").unlink()
    (udir / "device").symlink_to("../..")
    (tree / "dev" / "hisi_zip-4").unlink()
    (tree / "dev" / "stray").touch()
    result = _run_generate("--check", "--dir", str(copy))
    assert result.returncode == 1
    rel = udir.relative_to(tree).as_posix()
    for line in (
        f"kunpeng920-2p: differs: {rel}/isolate",
        f"kunpeng920-2p: differs: {rel}/device",
        "kunpeng920-2p: missing: dev/hisi_zip-4",
        "kunpeng920-2p: unexpected: dev/stray",
    ):
        assert line in result.stderr


def test_check_names_missing_and_unknown_trees(tmp_path: Path) -> None:
    """--check reports a named tree that is absent and a directory that names no tree."""
    copy = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, copy, symlinks=True)
    shutil.rmtree(copy / "faults")
    (copy / "old-tree").mkdir()
    result = _run_generate("--check", "--dir", str(copy))
    assert result.returncode == 1
    assert "missing tree: faults" in result.stderr
    assert "unexpected tree: old-tree" in result.stderr


def test_large_option_builds_into_a_new_directory(tmp_path: Path) -> None:
    """--large N --out DIR writes N devices and refuses a directory that is not empty."""
    out = tmp_path / "large"
    assert _run_generate("--large", "20", "--out", str(out)).returncode == 0
    assert len(list((out / "sys" / "class" / "uacce").iterdir())) == 20
    again = _run_generate("--large", "20", "--out", str(out))
    assert again.returncode != 0
    assert "not empty" in again.stderr
