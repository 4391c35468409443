"""`doctor`'s VF profile rows: a PF with its VFs, one waiting for the pod on its VF (named), a
profile refused on this node with its fix, and a skip where no profile is set."""

from __future__ import annotations

from pathlib import Path

from kae_deviceplugin.cli.checks import Status
from kae_deviceplugin.cli.doctor import Targets, run_checks
from kae_deviceplugin.cli.doctor_vfs import check_vf_profiles
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.podresources_emulator import PodResourcesEmulator
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import short_tmpdir

SEC0, SEC1 = "0000:76:00.0", "0000:b6:00.0"


def test_rows_say_done_waiting_with_the_pod_and_refused_with_the_fix() -> None:
    """kunpeng920-2p-vfs (2 VFs per PF): sec 2 is done; hpre 4 waits where a pod holds a VF,
    naming the pod, and is ready (nothing holds them) on the other HPRE PF."""
    with short_tmpdir() as tmp:
        TREES["kunpeng920-2p-vfs"].build(tmp / "node")
        inventory = scan(tmp / "node" / "sys", tmp / "node" / "dev")
        hpre_vf = next(d for d in inventory if d.engine == "hpre" and d.parent_pf)
        socket = tmp / "podres.sock"
        with PodResourcesEmulator(socket) as kubelet:
            kubelet.set_pods(
                [("default", "rsa", "main", "openfuyao.com/kae.hpre", [hpre_vf.pci_address])]
            )
            rows = check_vf_profiles(tmp / "node" / "sys", inventory, {"sec": 2, "hpre": 4}, socket)
    by_pf = {r.detail.split("PF ")[1].split(" ")[0]: r for r in rows}
    assert by_pf[SEC0].status is Status.OK and "has its 2 VFs" in by_pf[SEC0].detail
    held = by_pf[hpre_vf.parent_pf or ""]
    assert held.status is Status.WARN and "pod default/rsa" in held.detail
    assert "engines.hpre.vfs" in held.detail and held.fixes
    other_hpre = [r for pf, r in by_pf.items() if "hpre" in r.detail and r is not held]
    assert other_hpre and all("nothing holds them" in r.detail for r in other_hpre)


def test_a_profile_for_an_engine_the_node_lacks_is_refused_with_its_fix(tmp_path: Path) -> None:
    """A node without the engine (here none at all): one warn row naming the setting and fix."""
    TREES["empty-node"].build(tmp_path / "node")
    inventory = scan(tmp_path / "node" / "sys", tmp_path / "node" / "dev")
    (row,) = check_vf_profiles(
        tmp_path / "node" / "sys", inventory, {"zip": 2}, tmp_path / "absent.sock"
    )
    assert row.status is Status.WARN
    assert row.detail.startswith("engines.zip.vfs: 2 cannot be applied: this node has no zip")
    assert "leave engines.zip.vfs unset" in row.detail


def test_without_a_profile_doctor_has_no_vf_row(tmp_path: Path) -> None:
    """A default node's doctor run is as before: no VF profile row at all."""
    TREES["kunpeng920-2p"].build(tmp_path / "node")
    targets = Targets(
        tmp_path / "node" / "sys", tmp_path / "node" / "dev", tmp_path / "kubelet", "", None
    )
    assert [r for r in run_checks(targets) if r.check == "VF profile"] == []
