"""Who holds a VF, as the VF profiles ask it in each mode: pod-resources (both APIs' running pods)
and, in DRA mode, the claims in the driver's checkpoint (prepared before any container runs)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kae_deviceplugin.core.engines import DRA_DRIVER
from kae_deviceplugin.core.ids import pool_device_name
from kae_deviceplugin.daemon.vf_holders import pod_resources_holders
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.dra.api import plugin_dir
from kae_deviceplugin.dra.checkpoint import (
    Checkpoint,
    CheckpointFile,
    PreparedClaim,
    PreparedDevice,
)
from kae_deviceplugin.dra.vf_claims import prepared_claims
from kae_deviceplugin.testing.podresources_emulator import ClaimDevices, PodResourcesEmulator
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import short_tmpdir

VF = "0000:76:00.1"  # the first VF of hisi_sec2-0 in kunpeng920-2p-vfs


def test_holders_of_both_apis_and_of_prepared_claims() -> None:
    """A device-plugin pod on one VF, a DRA pod's claim on another (reported by pod-resources),
    and a claim only prepared (in the checkpoint) on a third: all three are holders."""
    with short_tmpdir() as tmp:
        TREES["kunpeng920-2p-vfs"].build(tmp / "node")
        inventory = scan(tmp / "node" / "sys", tmp / "node" / "dev")
        vfs = sorted(d.pci_address for d in inventory if d.parent_pf == "0000:76:00.0")
        other = next(d for d in inventory if d.parent_pf == "0000:b6:00.0")
        assert vfs[0] == VF
        kubelet_root = tmp / "kubelet"
        plugin_dir(kubelet_root).mkdir(parents=True)
        prepared = PreparedClaim(
            "uid-1",
            "team",
            "later",
            (PreparedDevice("req", "node", pool_device_name("sec", other.pci_address)),),
            "spec.json",
        )
        CheckpointFile(plugin_dir(kubelet_root)).save(Checkpoint().with_claim(prepared))
        socket = tmp / "podres.sock"
        with PodResourcesEmulator(socket) as kubelet:
            kubelet.set_pods(
                [("default", "dp-app", "main", "openfuyao.com/kae.sec", [vfs[0]])],
                [
                    ClaimDevices(
                        "team",
                        "dra-app",
                        "main",
                        "team",
                        "claim",
                        DRA_DRIVER,
                        "node",
                        [pool_device_name("sec", vfs[1])],
                    )
                ],
            )
            ask = pod_resources_holders(socket, prepared_claims(kubelet_root))
            holders = asyncio.run(ask(inventory))
        assert holders == {
            vfs[0]: ("pod default/dp-app",),
            vfs[1]: ("pod team/dra-app",),
            other.pci_address: ("claim team/later",),
        }


def test_no_answer_from_the_kubelet_is_unknown_not_nobody(tmp_path: Path) -> None:
    """A missing pod-resources socket gives None (unknown), never an empty "nobody holds it"."""
    ask = pod_resources_holders(tmp_path / "absent.sock")
    assert asyncio.run(ask(scan(tmp_path / "sys", tmp_path / "dev"))) is None
