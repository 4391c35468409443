"""Queues in use against queues claimed, per shared device (DRA), read at scrape time; absent
in device-plugin mode, whose exposition stays as it was."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.core.model import Inventory, QueueShare
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from kae_deviceplugin.dra.frontend import DraFrontEnd
from kae_deviceplugin.observability.metrics import Snapshot, device_families, exposition
from kae_deviceplugin.testing.sysfs_builder import set_attribute
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.dra.inventories import fixture_inventory, tree_inventory
from tests.support.fake_apiserver import FakeApiServer

FAMILIES = {"kae_device_queues_in_use", "kae_device_queues_claimed"}
ZIP_0 = "zip-0000-75-00-0"  # hisi_zip-4 of kunpeng920-2p


def _values(snapshot: Snapshot) -> dict[str, dict[str, float]]:
    body, _ = exposition(snapshot, Counters())
    return {
        family.name: {s.labels["device"]: s.value for s in family.samples}
        for family in text_string_to_metric_families(body.decode())
        if family.name in FAMILIES
    }


def test_device_plugin_scrapes_have_no_queue_share_series() -> None:
    """No shared queues (device-plugin mode, or DRA sharing nothing): neither family."""
    inventory = fixture_inventory("kunpeng920-2p")
    names = {f.name for f in device_families(Snapshot(inventory, {}, frozenset(), None))}
    assert not names & FAMILIES


def test_in_use_is_total_minus_free_read_at_scrape_time(tmp_path: Path) -> None:
    """A ZIP of 256 queues with 40 free: 216 in use against the 24 claimed; after more open,
    the next scrape says so without any rescan (available_instances is read then)."""
    TREES["kunpeng920-2p"].build(tmp_path)
    inventory = tree_inventory(tmp_path)
    zip_dev = next(d for d in inventory if d.name == "hisi_zip-4")
    set_attribute(tmp_path, "hisi_zip-4", "available_instances", "40")
    shares = {zip_dev.pci_address: QueueShare(total=256, claimed=24)}
    snapshot = Snapshot(inventory, {}, frozenset(), None, shares)
    assert _values(snapshot) == {
        "kae_device_queues_in_use": {"hisi_zip-4": 216},
        "kae_device_queues_claimed": {"hisi_zip-4": 24},
    }
    set_attribute(tmp_path, "hisi_zip-4", "available_instances", "0")
    assert _values(snapshot)["kae_device_queues_in_use"] == {"hisi_zip-4": 256}


def test_the_dra_front_end_sums_the_claims_of_each_shared_device(tmp_path: Path) -> None:
    """Two prepared shares of one ZIP (8 and 16 queues) claim 24 of it; the other ZIP of the
    shared engine claims 0; devices of unshared engines are not listed; sharing nothing is
    None (no series at all)."""
    TREES["kunpeng920-2p"].build(tmp_path / "tree")
    inventory = tree_inventory(tmp_path / "tree")
    settings = Settings(
        sysfs_root=tmp_path / "tree" / "sys",
        kubelet_root=tmp_path / "kubelet",
        cdi_dir=tmp_path / "cdi",
        shared_engines=frozenset({"zip"}),
    )
    front = DraFrontEnd(settings, FakeApiServer(), "worker-1", ContainerFiles())
    front.inventory = inventory
    front._slices(inventory, 1, frozenset())  # what the publisher calls: it learns the queue totals
    front.preparer.state = Checkpoint(
        {
            uid: PreparedClaim(
                uid, "team-a", uid, (PreparedDevice("z", "worker-1", ZIP_0, uid, n),), "s"
            )
            for uid, n in (("a", 8), ("b", 16))
        }
    )
    shares = front.shared_queues()
    assert shares is not None
    by_name = {d.pci_address: d.name for d in inventory}
    claimed = {by_name[pci]: share.claimed for pci, share in shares.items()}
    assert claimed == {"hisi_zip-4": 24, "hisi_zip-5": 0}
    assert all(share.total == 256 for share in shares.values())
    unshared = DraFrontEnd(
        Settings(kubelet_root=tmp_path / "k2", sysfs_root=settings.sysfs_root),
        FakeApiServer(),
        "worker-1",
        ContainerFiles(),
    )
    unshared.inventory = Inventory(inventory.devices)
    assert unshared.shared_queues() is None
