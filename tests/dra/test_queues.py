"""Queue totals per function: the QM driver's split, read from module parameters and SR-IOV."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.queues import QueueTotals, queue_totals, vf_shares
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.sysfs_builder import build_tree, set_pci_attribute
from kae_deviceplugin.testing.sysfs_trees import TREES, kunpeng_pf, vf_of, vf_queues, with_vfs
from tests.support.dra_sysfs import set_module_parameter

DRIVERS = ("hisi_hpre", "hisi_sec2", "hisi_zip")


def _scan(root: Path) -> Inventory:
    return scan(root / "sys", root / "dev")


def _with_parameters(root: Path, pf_q_num: int) -> None:
    for driver in DRIVERS:
        set_module_parameter(root, driver, "pf_q_num", str(pf_q_num))


def test_pfs_keep_pf_q_num_and_vfs_share_the_rest(tmp_path: Path) -> None:
    """2 VFs per PF with pf_q_num 256 of 1024: PFs 256, VFs 384 each, matching the free
    counts the fixture tree gives its idle functions."""
    TREES["kunpeng920-2p-vfs"].build(tmp_path)
    _with_parameters(tmp_path, 256)
    inventory = _scan(tmp_path)
    totals = queue_totals(tmp_path / "sys", inventory)
    assert len(totals) == 18
    for device in inventory:
        assert totals[device.pci_address] == (256 if device.parent_pf is None else 384)
        assert totals[device.pci_address] == device.available_instances


def test_an_uneven_split_gives_the_remainder_to_the_last_vf(tmp_path: Path) -> None:
    """5 VFs of one HPRE PF with pf_q_num 64: 960 left, 192 each (no remainder); with 7 VFs,
    137 each and the last one 138, in virtfn order."""
    pf = kunpeng_pf("hisi_hpre", 0, 0)
    build_tree(tmp_path, with_vfs([pf], [7]))
    _with_parameters(tmp_path, 64)
    inventory = _scan(tmp_path)
    totals = queue_totals(tmp_path / "sys", inventory)
    vfs = sorted((d for d in inventory if d.parent_pf), key=lambda d: d.pci_address)
    assert [totals[d.pci_address] for d in vfs] == [137] * 6 + [138]
    assert totals[pf.pci_address] == 64


def test_kunpeng916_controllers_have_4096_queues(tmp_path: Path) -> None:
    """Revision 0x20 (V1): the VFs share 4096 minus the PF's queues."""
    pf = kunpeng_pf("hisi_zip", 0, 0, revision="0x20")
    build_tree(tmp_path, [pf, vf_of(pf, 0, 1)])
    _with_parameters(tmp_path, 96)
    totals = queue_totals(tmp_path / "sys", _scan(tmp_path))
    assert totals[vf_of(pf, 0, 1).pci_address] == 4000


def test_without_the_parameter_the_largest_free_count_seen_counts(tmp_path: Path) -> None:
    """No pf_q_num file: the total is the most free queues seen so far, so a function in use
    at one scan keeps the figure an idle scan showed; a removed function is forgotten."""
    TREES["kunpeng920-2p"].build(tmp_path)
    for parameter in (tmp_path / "sys" / "module").glob("*/parameters/pf_q_num"):
        parameter.unlink()  # the fixtures show the drivers' parameters, as a node does
    totals = QueueTotals(tmp_path / "sys")
    idle = _scan(tmp_path)
    assert set(totals.update(idle).values()) == {256}
    busy = Inventory(tuple(dataclasses.replace(d, available_instances=3) for d in idle))
    assert set(totals.update(busy).values()) == {256}
    assert totals.update(Inventory(busy.devices[:1])) == {busy.devices[0].pci_address: 256}
    # devices[1] was gone at the last update: its idle figure is forgotten with it.
    assert totals.update(Inventory(busy.devices[1:2])) == {busy.devices[1].pci_address: 3}


def test_unreadable_sriov_files_fall_back_too(tmp_path: Path) -> None:
    """A VF whose PF hides sriov_numvfs gets the fallback, the PF keeps pf_q_num."""
    TREES["kunpeng920-2p-vfs"].build(tmp_path)
    _with_parameters(tmp_path, 256)
    set_pci_attribute(tmp_path, "0000:79:00.0", "sriov_numvfs", None)
    inventory = _scan(tmp_path)
    totals = queue_totals(tmp_path / "sys", inventory)
    by_address = {d.pci_address: d for d in inventory}
    assert totals["0000:79:00.0"] == 256
    assert totals["0000:79:00.1"] == by_address["0000:79:00.1"].available_instances


@pytest.mark.parametrize(
    ("total", "vfs", "cap", "expected"),
    [
        (768, 2, None, [384, 384]),
        (768, 5, None, [153, 153, 153, 153, 156]),
        (1000, 3, 334, [333, 333, 334]),
        (1000, 3, 333, [333, 333, 333]),  # the kernel leaves the queue it cannot place unused
        (10, 4, 3, [2, 2, 3, 3]),  # the remainder goes one by one from the last VF down
        (2, 3, None, []),  # fewer queues than VFs: the kernel refuses the VFs
    ],
)
def test_vf_shares_follow_qm_vf_q_assign(
    total: int, vfs: int, cap: int | None, expected: list[int]
) -> None:
    """The split as the kernel computes it, cap included."""
    assert vf_shares(total, vfs, cap) == expected


def test_the_fixture_trees_split_alike() -> None:
    """The fixture trees' free counts for idle VFs follow the same split, for 1 to 63 VFs."""
    for vfs in range(1, 64):
        assert vf_shares(1024 - 256, vfs) == vf_queues(vfs)
