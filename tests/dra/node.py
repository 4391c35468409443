"""A fixture node for the DRA tests: a built sysfs tree, its inventory, claims and preparer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kae_deviceplugin.container.serving import ServingPolicy
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.queues import queue_totals
from kae_deviceplugin.dra.checkpoint import CheckpointFile
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.dra.prepare import ClaimPreparer
from kae_deviceplugin.dra.slice_devices import device_name, share_limit
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.dra.inventories import tree_inventory
from tests.dra.policy import serving_policy
from tests.support.dra_claims import ClaimStore, Result, claim_object

POOL = "worker-1"
KIND = "openfuyao.com/kae"
HPRE_0 = "hpre-0000-79-00-0"  # hisi_hpre-2, NUMA node 0
SEC_0 = "sec-0000-76-00-0"  # hisi_sec2-0, NUMA node 0


@dataclass
class Node:
    """A fixture node: its tree, what discovery sees, the API's claims, and the preparer."""

    root: Path
    inventory: Inventory
    store: ClaimStore
    policy: ServingPolicy
    # dra.sharedEngines of the node: every engine unless a test says otherwise
    shared_engines: frozenset[str] = field(default=frozenset({"hpre", "sec", "zip"}))

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def checkpoint(self) -> CheckpointFile:
        return CheckpointFile(self.root / "plugin")

    def preparer(self, claim_timeout: float = 5.0) -> ClaimPreparer:
        return ClaimPreparer(
            pool=POOL,
            inventory=lambda: self.inventory,
            policy=lambda: self.policy,
            get_claim=self.store.get,
            checkpoint=self.checkpoint,
            cdi_dir=self.cdi_dir,
            claim_timeout=claim_timeout,
            shares=self.share_limits,
        )

    def share_limits(self) -> dict[str, int | str]:
        """What the driver publishes for shares on this node, as its front end computes it."""
        totals = queue_totals(self.root / "sys", self.inventory)
        return {
            device_name(d): share_limit(d, totals.get(d.pci_address), self.shared_engines)
            for d in self.inventory
        }

    def rescan(self) -> None:
        self.inventory = tree_inventory(self.root)

    def spec(self, uid: str) -> dict[str, object]:
        loaded: dict[str, object] = json.loads(self.spec_path(uid).read_text())
        return loaded

    def spec_path(self, uid: str) -> Path:
        return self.cdi_dir / f"openfuyao.com-kae_{uid}.json"


def build_node(root: Path, tree: str = "kunpeng920-2p") -> Node:
    """The named fixture tree built under ``root``, with no claims yet."""
    TREES[tree].build(root)
    return Node(root, tree_inventory(root), ClaimStore(), serving_policy(root))


def add_claim(node: Node, name: str, *results: Result) -> ClaimRef:
    """An allocated claim in namespace team-a, known to the API; how the kubelet names it."""
    obj = node.store.add(claim_object("team-a", name, list(results)))
    return ClaimRef("team-a", name, obj["metadata"]["uid"])
