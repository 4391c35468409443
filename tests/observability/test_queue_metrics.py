"""Queues in use against queues granted, on every device and in both modes, read at scrape time,
and the holder of a device held alone (observability/queue_metrics.py)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.core.model import ClaimHold, Inventory, QueueBook
from kae_deviceplugin.core.views import EngineSettings, build_views
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.discovery.queues import QueueTotals
from kae_deviceplugin.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from kae_deviceplugin.dra.frontend import DraFrontEnd
from kae_deviceplugin.kubelet.podresources import Allocation, Allocations, ClaimDevice
from kae_deviceplugin.observability.metrics import Snapshot, exposition
from kae_deviceplugin.testing.sysfs_builder import set_attribute
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.dra.inventories import tree_inventory
from tests.support.dra_sysfs import set_module_parameter
from tests.support.fake_apiserver import FakeApiServer

IN_USE, CLAIMED, HOLDERS = (
    "kae_device_queues_in_use",
    "kae_device_queues_claimed",
    "kae_device_holders",
)
HPRE = "openfuyao.com/kae.hpre"
HPRE_0 = "0000:79:00.0"  # hisi_hpre-2 of kunpeng920-2p
ZIP_4 = "0000:75:00.0"  # hisi_zip-4
ZIP_0 = "zip-0000-75-00-0"  # its name in the DRA pool


def scraped(snapshot: Snapshot) -> dict[str, dict[str, tuple[dict[str, str], float]]]:
    """Family -> device -> (labels, value), from the exposition a scrape gets."""
    body, _ = exposition(snapshot, Counters())
    return {
        family.name: {s.labels["device"]: (s.labels, s.value) for s in family.samples}
        for family in text_string_to_metric_families(body.decode())
        if family.name in (IN_USE, CLAIMED, HOLDERS)
    }


def values(snapshot: Snapshot, family: str) -> dict[str, float]:
    return {device: value for device, (_, value) in scraped(snapshot).get(family, {}).items()}


def node(tmp_path: Path) -> tuple[Path, Inventory, dict[str, int]]:
    """kunpeng920-2p built under ``tmp_path``: every function has 256 queues, all free."""
    TREES["kunpeng920-2p"].build(tmp_path)
    inventory = tree_inventory(tmp_path)
    return tmp_path, inventory, {d.pci_address: 256 for d in inventory}


def test_device_plugin_mode_every_device_has_in_use_and_granted(tmp_path: Path) -> None:
    """A pod holds hpre-0 (the whole function is its grant) and opens 3 queues; the other
    devices are free (0 granted, 0 in use); each scrape reads available_instances anew; the
    holder series names the pod of the one held device and no other."""
    root, inventory, totals = node(tmp_path)
    views = build_views(inventory, {})
    held = Allocations((Allocation(HPRE, HPRE_0, "shop", "checkout", "tls"),))
    snapshot = Snapshot(inventory, views, frozenset(views), held, QueueBook(totals))
    assert values(snapshot, IN_USE) == dict.fromkeys((d.name for d in inventory), 0)
    granted = values(snapshot, CLAIMED)
    assert granted.pop("hisi_hpre-2") == 256 and set(granted.values()) == {0}
    set_attribute(root, "hisi_hpre-2", "available_instances", "253")
    assert values(snapshot, IN_USE)["hisi_hpre-2"] == 3
    holders = scraped(snapshot)[HOLDERS]
    assert list(holders) == ["hisi_hpre-2"]
    labels, count = holders["hisi_hpre-2"]
    assert count == 1
    assert (labels["namespace"], labels["pod"], labels["claim"]) == ("shop", "checkout", "")


def test_a_vf_s_total_is_its_share_of_the_controller(tmp_path: Path) -> None:
    """Totals as the front ends book them (QueueTotals): with pf_q_num 256 and two VFs per PF,
    a VF's total is 384 (the driver's split), so a pod holding hisi_hpre-10 with 380 free has 4
    in use of the 384 granted, and the PF keeps its 256."""
    TREES["kunpeng920-2p-vfs"].build(tmp_path)
    for driver in ("hisi_hpre", "hisi_sec2", "hisi_zip"):
        set_module_parameter(tmp_path, driver, "pf_q_num", "256")
    set_attribute(tmp_path, "hisi_hpre-10", "available_instances", "380")
    inventory = tree_inventory(tmp_path)
    book = QueueBook(QueueTotals(tmp_path / "sys").update(inventory))
    views = build_views(inventory, {})
    held = Allocations((Allocation(HPRE, "0000:79:00.1", "shop", "checkout", "tls"),))
    snapshot = Snapshot(inventory, views, frozenset(views), held, book)
    assert values(snapshot, IN_USE)["hisi_hpre-10"] == 4
    assert values(snapshot, CLAIMED)["hisi_hpre-10"] == 384
    assert (book.totals["0000:79:00.0"], book.totals["0000:79:00.2"]) == (256, 384)


def test_unknown_holders_leave_granted_absent_but_in_use_shown(tmp_path: Path) -> None:
    """Device-plugin mode with the pod-resources API down: no granted or holder series (not a
    wrong 0), while in use is still read."""
    _, inventory, totals = node(tmp_path)
    views = build_views(inventory, {})
    snapshot = Snapshot(inventory, views, frozenset(views), None, QueueBook(totals))
    assert len(values(snapshot, IN_USE)) == len(inventory)
    assert values(snapshot, CLAIMED) == {} and values(snapshot, HOLDERS) == {}


def test_a_device_two_pods_share_names_no_holder(tmp_path: Path) -> None:
    """Two pods on one device (shares 2, device-plugin mode): granted is the whole function,
    the holder series counts 2 with empty holder labels (in use cannot be told apart)."""
    _, inventory, totals = node(tmp_path)
    views = build_views(inventory, {"hpre": EngineSettings(shares=2)})
    rows = (
        Allocation(HPRE, f"{HPRE_0}::0", "shop", "a", "c"),
        Allocation(HPRE, f"{HPRE_0}::1", "shop", "b", "c"),
    )
    snapshot = Snapshot(inventory, views, frozenset(views), Allocations(rows), QueueBook(totals))
    assert values(snapshot, CLAIMED)["hisi_hpre-2"] == 256
    labels, count = scraped(snapshot)[HOLDERS]["hisi_hpre-2"]
    assert count == 2 and (labels["namespace"], labels["pod"], labels["claim"]) == ("", "", "")


def test_dra_mode_grants_are_the_function_or_the_sum_of_shares(tmp_path: Path) -> None:
    """An exclusive claim is granted the whole function and named with its one pod (from the
    kubelet's dynamic resources); two shares of a ZIP (8 + 16) are granted 24, with two
    holders; a free device 0; in use above the grant shows as such."""
    root, inventory, totals = node(tmp_path)
    claims = {
        HPRE_0: (ClaimHold("shop", "tls-key"),),
        ZIP_4: (ClaimHold("etl", "a", 8), ClaimHold("etl", "b", 16)),
    }
    pods = (ClaimDevice("shop", "checkout", "tls", "shop", "tls-key", "node-a", "hpre-x"),)
    snapshot = Snapshot(
        inventory, {}, frozenset(), Allocations((), pods), QueueBook(totals, claims)
    )
    granted = values(snapshot, CLAIMED)
    assert (granted.pop("hisi_hpre-2"), granted.pop("hisi_zip-4")) == (256, 24)
    assert set(granted.values()) == {0}
    set_attribute(root, "hisi_zip-4", "available_instances", "216")
    assert values(snapshot, IN_USE)["hisi_zip-4"] == 40  # above the 24 granted
    holders = scraped(snapshot)[HOLDERS]
    labels, count = holders["hisi_hpre-2"]
    assert count == 1
    assert (labels["namespace"], labels["pod"], labels["claim"]) == ("shop", "checkout", "tls-key")
    assert holders["hisi_zip-4"][1] == 2 and holders["hisi_zip-4"][0]["claim"] == ""
    assert set(holders) == {"hisi_hpre-2", "hisi_zip-4"}


def test_the_dra_front_end_books_each_claim_on_its_device(tmp_path: Path) -> None:
    """Two prepared shares of one ZIP (8 and 16 queues) and an exclusive claim on another
    device are booked on their PCI addresses, the exclusive one as the whole function (None);
    every device's total is the one the slices published (256), and learning the totals wakes
    the claim status writer (the data names them)."""
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
    front.status._wake.clear()
    front._slices(inventory, 1, frozenset())  # what the publisher calls: it learns the queue totals
    assert front.status._wake.is_set()  # new totals: the claims' status data is written again
    shares = {
        uid: PreparedClaim(
            uid, "team-a", uid, (PreparedDevice("z", "worker-1", ZIP_0, uid, n),), "s"
        )
        for uid, n in (("a", 8), ("b", 16))
    }
    hpre = PreparedDevice("h", "worker-1", "hpre-0000-79-00-0")
    other_pool = PreparedDevice("h", "worker-2", "hpre-0000-b9-00-0")
    exclusive = PreparedClaim("c", "team-b", "c", (hpre, other_pool), "s")
    front.preparer.state = Checkpoint({**shares, "c": exclusive})
    book = front.queue_book()
    assert set(book.totals.values()) == {256} and len(book.totals) == len(inventory)
    assert book.claims == {
        ZIP_4: (ClaimHold("team-a", "a", 8), ClaimHold("team-a", "b", 16)),
        HPRE_0: (ClaimHold("team-b", "c", None),),
    }
