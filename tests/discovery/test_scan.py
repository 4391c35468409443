"""Discovery on every kernel layout in the fixtures, and on trees built in the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from kae_deviceplugin.core import health
from kae_deviceplugin.core.model import Function, Health
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.sysfs_builder import (
    add_class_link,
    remove_dev_node,
    set_attribute,
    set_driver_bound,
    set_pci_attribute,
)
from kae_deviceplugin.testing.sysfs_trees import TREES

FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"

REAL_2P = {
    "hisi_sec2-0": ("sec", "0000:76:00.0", 0),
    "hisi_sec2-1": ("sec", "0000:b6:00.0", 2),
    "hisi_hpre-2": ("hpre", "0000:79:00.0", 0),
    "hisi_hpre-3": ("hpre", "0000:b9:00.0", 2),
    "hisi_zip-4": ("zip", "0000:75:00.0", 0),
    "hisi_zip-5": ("zip", "0000:b5:00.0", 2),
}


def scan_fixture(name: str):  # type: ignore[no-untyped-def]
    return scan(FIXTURES / name / "sys", FIXTURES / name / "dev")


def built(tmp_path: Path, tree: str) -> Path:
    TREES[tree].build(tmp_path)
    return tmp_path


@pytest.mark.parametrize("tree", ["kunpeng920-2p", "kae1-4.19", "kunpeng920-v3"])
def test_two_socket_node_has_exactly_the_six_real_devices(tree: str) -> None:
    """The real 2-socket node: six PFs, right engine, PCI address and NUMA node, all Healthy."""
    inventory = scan_fixture(tree)
    found = {d.name: (d.engine, d.pci_address, d.numa_node) for d in inventory}
    assert found == REAL_2P
    for device in inventory:
        assert device.function is Function.PF
        assert device.parent_pf is None
        assert device.health is Health.HEALTHY, device.reasons
        assert device.resource == f"openfuyao.com/kae.{device.engine}"
        assert device.dev_node == f"/dev/{device.name}"
        assert device.dev_node_exists


def test_kae2_attributes_are_parsed() -> None:
    """openEuler KAE 2.0: api, flags 129, algorithms, queues, isolate and dev_state read."""
    hpre = {d.name: d for d in scan_fixture("kunpeng920-2p")}["hisi_hpre-2"]
    assert hpre.api == "hisi_qm_v2"
    assert hpre.flags == 129
    assert hpre.algorithms == ("rsa", "dh")
    assert hpre.available_instances == 256
    assert hpre.isolate == 0
    assert hpre.dev_state == 0


def test_v3_api_is_reported() -> None:
    """Kunpeng 920 V3 reports api hisi_qm_v3."""
    assert {d.api for d in scan_fixture("kunpeng920-v3")} == {"hisi_qm_v3"}


def test_kae1_attributes_live_under_attrs() -> None:
    """openEuler 4.19 / KAE 1.x: every attribute is read from attrs/."""
    sec = {d.name: d for d in scan_fixture("kae1-4.19")}["hisi_sec2-1"]
    assert sec.algorithms == ("cipher", "digest", "aead")
    assert sec.available_instances == 256
    assert sec.numa_node == 2
    assert sec.isolate is None and sec.dev_state is None


def test_vfs_are_reported_with_their_parent_pf() -> None:
    """Each VF carries function vf and the PCI address of its PF; PFs carry none."""
    inventory = scan_fixture("kunpeng920-2p-vfs")
    assert len(inventory) == 18
    for device in inventory:
        if device.function is Function.VF:
            assert device.parent_pf == device.pci_address[:-1] + "0"
            assert device.pf_address == device.parent_pf
        else:
            assert device.parent_pf is None
    assert sum(d.function is Function.VF for d in inventory) == 12


@pytest.mark.parametrize("tree", ["mainline-5.10", "mainline-6.6"])
def test_mainline_numa_comes_from_the_pci_function(tree: str) -> None:
    """Without node_id (mainline) the NUMA node is read through the device link."""
    inventory = scan_fixture(tree)
    assert len(inventory) == 3
    assert {d.numa_node for d in inventory} == {0}
    assert all(d.healthy for d in inventory)


def test_mainline_without_isolate_is_not_a_fault() -> None:
    """Kernels before 6.2 have no isolate file and no dev_state: that is Healthy."""
    for device in scan_fixture("mainline-5.10"):
        assert device.isolate is None and device.dev_state is None
        assert device.healthy


def test_empty_node_and_missing_class_dir_give_an_empty_inventory(tmp_path: Path) -> None:
    """No /sys/class/uacce means no KAE here: empty, not an error."""
    assert len(scan_fixture("empty-node")) == 0
    assert len(scan(tmp_path, tmp_path)) == 0


FAULTS = {
    "hisi_sec2-0": [health.ISOLATED],
    "hisi_hpre-2": [health.ENGINE_STOPPED],
    "hisi_zip-4": [health.DEV_NODE_MISSING],
    "hisi_sec2-1": [health.QUEUES_UNREADABLE],
    "hisi_hpre-3": [health.DRIVER_UNBOUND],
    "hisi_sec2-6": [health.DEVICE_LINK_BROKEN],
}


def test_fault_tree_reports_each_fault_with_its_reason() -> None:
    """Every fault device is Unhealthy with exactly its reason; NUMA-unknown stays Healthy."""
    devices = {d.name: d for d in scan_fixture("faults")}
    for name, reasons in FAULTS.items():
        assert devices[name].health is Health.UNHEALTHY, name
        assert list(devices[name].reasons) == reasons, name
    numa_unknown = devices["hisi_zip-5"]
    assert numa_unknown.healthy and numa_unknown.numa_node is None


def test_fault_tree_skips_unnameable_entries_with_warnings_naming_the_path() -> None:
    """Dangling links, loops and stray files are skipped; each warning names its path."""
    inventory = scan_fixture("faults")
    names = {d.name for d in inventory}
    assert not names & {"hisi_hpre-7", "hisi_sec2-10", "hisi_zip-8"}
    assert not any(name.startswith(("virtio", "hisi_foo")) for name in names)
    for name in ("hisi_hpre-7", "hisi_sec2-10", "hisi_zip-8"):
        assert any(f"class/uacce/{name}" in w for w in inventory.warnings), name


def test_health_follows_sysfs_and_recovers(tmp_path: Path) -> None:
    """isolate, dev_state, /dev node and driver binding each flip health; clearing them heals."""
    root = built(tmp_path, "kunpeng920-2p")

    def hpre() -> tuple[Health, tuple[str, ...]]:
        device = {d.name: d for d in scan(root / "sys", root / "dev")}["hisi_hpre-2"]
        return device.health, device.reasons

    assert hpre() == (Health.HEALTHY, ())
    set_attribute(root, "hisi_hpre-2", "isolate", "1")
    assert hpre() == (Health.UNHEALTHY, (health.ISOLATED,))
    set_attribute(root, "hisi_hpre-2", "isolate", "0")
    set_attribute(root, "hisi_hpre-2", "dev_state", "-1")
    assert hpre() == (Health.UNHEALTHY, (health.ENGINE_STOPPED,))
    set_attribute(root, "hisi_hpre-2", "dev_state", "0")
    set_driver_bound(root, "0000:79:00.0", False)
    assert hpre() == (Health.UNHEALTHY, (health.DRIVER_UNBOUND,))
    set_driver_bound(root, "0000:79:00.0", True)
    remove_dev_node(root, "hisi_hpre-2")
    assert hpre() == (Health.UNHEALTHY, (health.DEV_NODE_MISSING,))


@pytest.mark.parametrize("value", ["", "abc", "1x", "\xff", "99999999999999999999999"])
def test_garbage_isolate_is_unhealthy_not_a_crash(tmp_path: Path, value: str) -> None:
    """A present isolate file we cannot parse is a fault we report, never an exception."""
    root = built(tmp_path, "kunpeng920-2p")
    set_attribute(root, "hisi_sec2-0", "isolate", value)
    device = {d.name: d for d in scan(root / "sys", root / "dev")}["hisi_sec2-0"]
    if value == "99999999999999999999999":
        assert device.reasons == (health.ISOLATED,)
    else:
        assert device.reasons == (health.ISOLATE_UNREADABLE,)


def test_node_id_minus_one_falls_back_to_pci_numa_node(tmp_path: Path) -> None:
    """node_id -1 (no NUMA) and pci numa_node -1 mean unknown; node_id garbage falls back to PCI."""
    root = built(tmp_path, "kunpeng920-2p")
    set_attribute(root, "hisi_zip-5", "node_id", "-1")
    set_pci_attribute(root, "0000:b5:00.0", "numa_node", "-1")
    set_attribute(root, "hisi_zip-4", "node_id", "garbage")
    devices = {d.name: d for d in scan(root / "sys", root / "dev")}
    assert devices["hisi_zip-5"].numa_node is None
    assert devices["hisi_zip-4"].numa_node == 0


def test_link_outside_the_root_is_skipped(tmp_path: Path) -> None:
    """A class link escaping the sysfs root is not followed into the host's tree."""
    root = built(tmp_path, "kunpeng920-2p")
    outside = tmp_path / "elsewhere" / "uacce" / "hisi_hpre-9"
    outside.mkdir(parents=True)
    add_class_link(root, "hisi_hpre-9", str(outside))
    inventory = scan(root / "sys", root / "dev")
    assert "hisi_hpre-9" not in {d.name for d in inventory}
    assert any("hisi_hpre-9" in w for w in inventory.warnings)


def test_second_entry_on_one_pci_function_is_skipped(tmp_path: Path) -> None:
    """The PCI address is the key: a second class entry resolving to one function is dropped."""
    root = built(tmp_path, "kunpeng920-2p")
    add_class_link(
        root, "hisi_hpre-99", "../../devices/pci0000:78/0000:78:00.0/0000:79:00.0/uacce/hisi_hpre-2"
    )
    inventory = scan(root / "sys", root / "dev")
    assert [d.name for d in inventory if d.pci_address == "0000:79:00.0"] == ["hisi_hpre-2"]
    assert any("already reported" in w for w in inventory.warnings)


@pytest.mark.parametrize(
    ("tree", "version"),
    [
        ("kunpeng920-2p", "2.0.2"),  # KAE 2.0 package: MODULE_VERSION
        ("kae1-4.19", "1.3.11"),
        ("mainline-6.6", None),  # in-tree, no srcversion either: unknown
    ],
)
def test_driver_version_comes_from_the_module_of_the_bound_driver(
    tree: str, version: str | None
) -> None:
    """Each device reports its driver and the module's `version` (or None where there is none)."""
    devices = scan_fixture(tree).devices
    assert devices
    for device in devices:
        assert device.driver == device.name.rpartition("-")[0]
        assert device.driver_version == version


def test_srcversion_stands_in_where_the_module_sets_no_version() -> None:
    """A 5.10 in-tree module has only `srcversion`: that is the version reported."""
    for device in scan_fixture("mainline-5.10"):
        module = FIXTURES / "mainline-5.10" / "sys" / "module" / str(device.driver)
        assert device.driver_version == (module / "srcversion").read_text().strip()
        assert not (module / "version").exists()


def test_driver_version_follows_the_driver_module_link(tmp_path: Path) -> None:
    """The module is the one the PCI function's driver links to, not one guessed by name."""
    root = built(tmp_path, "kunpeng920-2p")
    other = root / "sys" / "module" / "hisi_qm_ng"
    other.mkdir()
    (other / "version").write_text("9.9\n")
    link = root / "sys" / "bus" / "pci" / "drivers" / "hisi_hpre" / "module"
    link.unlink()
    link.symlink_to("../../../../module/hisi_qm_ng")
    found = {d.name: d for d in scan(root / "sys", root / "dev")}
    assert found["hisi_hpre-2"].driver_version == "9.9"
    assert found["hisi_zip-4"].driver_version == "2.0.2"
    set_driver_bound(root, "0000:79:00.0", False)
    unbound = {d.name: d for d in scan(root / "sys", root / "dev")}["hisi_hpre-2"]
    assert (unbound.driver, unbound.driver_version) == (None, None)
    link.unlink()  # a driver with no module (built in): known driver, unknown version
    set_driver_bound(root, "0000:79:00.0", True)
    builtin = {d.name: d for d in scan(root / "sys", root / "dev")}["hisi_hpre-2"]
    assert (builtin.driver, builtin.driver_version) == ("hisi_hpre", None)


def test_fault_tree_has_a_driver_without_any_version() -> None:
    """The faults tree's zip module shows no version files: its devices say unknown (None)."""
    found = {d.name: d for d in scan_fixture("faults")}
    assert found["hisi_zip-4"].driver_version is None
    assert found["hisi_sec2-0"].driver_version == "2.0.2"


HUGE = "9" * 5000  # past Python's 4300-digit limit on int(): int(HUGE) raises ValueError


@pytest.mark.parametrize(
    ("attr", "reasons"),
    [
        ("isolate", (health.ISOLATE_UNREADABLE,)),
        ("dev_state", (health.DEV_STATE_UNREADABLE,)),
        ("available_instances", (health.QUEUES_UNREADABLE,)),
        ("node_id", ()),  # NUMA falls back to the PCI device's numa_node
        ("flags", ()),
    ],
)
def test_an_integer_of_5000_digits_is_an_unreadable_value_not_a_crash(
    tmp_path: Path, attr: str, reasons: tuple[str, ...]
) -> None:
    """An attribute holding a number longer than Python converts (4300 digits) is read as a
    value that is not a number: the reason it names where health depends on it, never the
    ValueError that ended the daemon."""
    root = built(tmp_path, "kunpeng920-2p")
    set_attribute(root, "hisi_sec2-0", attr, HUGE)
    device = {d.name: d for d in scan(root / "sys", root / "dev")}["hisi_sec2-0"]
    assert device.reasons == reasons
    assert device.health is (Health.UNHEALTHY if reasons else Health.HEALTHY)
