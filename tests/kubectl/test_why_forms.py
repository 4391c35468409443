"""``why`` on the other request forms and node states: firstAvailable, allocationMode All, a
cordoned or tainted node, a pod placed but not running, a pod served through an extended
resource's claim; and ``nodes`` reading only a pool's newest generation."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from tests.kubectl.cluster import (
    DRA_1,
    DRA_2,
    HPRE_2,
    HPRE_CLASS,
    SEC_CLASS,
    ZIP_CLASS,
    claim,
    dra_slices,
    exactly,
    kubectl_kae,
    pod,
)
from tests.kubectl.test_why import pending_with, reasons, why
from tests.support.dra_claims import Result as Allocated
from tests.support.http_apiserver import HttpApiServer


def test_first_available_takes_the_first_subrequest_that_fits(
    api: HttpApiServer, tmp_path: Path
) -> None:
    """Three HPREs (none anywhere), else one SEC: worker-1 fits through the second; on
    worker-2 both are named with their subrequest."""
    request = {"name": "any", "firstAvailable": [
        {"name": "many", "deviceClassName": HPRE_CLASS, "count": 3},
        {"name": "one", "deviceClassName": SEC_CLASS},
    ]}  # fmt: skip
    pending_with(api, "either", {"requests": [request]})
    found = reasons(why(api, tmp_path, "either"))
    assert found[DRA_1] == []
    assert "request any: any/many: needs 3, 0 usable" in found[DRA_2]
    assert "request any: any/one: needs 1, 0 usable" in found[DRA_2]


def test_allocation_mode_all_needs_every_matching_device(
    api: HttpApiServer, tmp_path: Path
) -> None:
    """Every ZIP: worker-2 has one tainted, so not all of its ZIPs can be taken."""
    pending_with(api, "all-zip", {"requests": [exactly("zip", ZIP_CLASS, allocationMode="All")]})
    found = reasons(why(api, tmp_path, "all-zip"))
    assert found[DRA_1] == []
    assert found[DRA_2][-1] == "request zip: allocationMode All: 2 devices match, 1 usable"


def test_a_cordoned_node_and_a_node_taint(api: HttpApiServer, tmp_path: Path) -> None:
    """worker-1 cordoned and tainted: both said before any device; a toleration lifts the
    taint's line."""
    node = api.store.get("nodes", None, DRA_1)
    node["spec"] = {"unschedulable": True, "taints": [
        {"key": "dedicated", "value": "crypto", "effect": "NoSchedule"}]}  # fmt: skip
    api.store.replace("nodes", None, DRA_1, node)
    pending_with(api, "sec", {"requests": [exactly("cipher", SEC_CLASS)]})
    assert reasons(why(api, tmp_path, "sec"))[DRA_1] == [
        "the node is cordoned (unschedulable)",
        "the node is tainted dedicated=crypto:NoSchedule and the pod does not tolerate it",
    ]
    spec = {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "crypto"}]}
    pending_with(api, "sec2", {"requests": [exactly("cipher", SEC_CLASS)]}, spec=spec)
    assert reasons(why(api, tmp_path, "sec2"))[DRA_1] == ["the node is cordoned (unschedulable)"]


def test_a_placed_pod_served_through_its_extended_resource_claim(
    api: HttpApiServer, tmp_path: Path
) -> None:
    """A pod asking openfuyao.com/kae.hpre on a DRA node, placed but still starting: it holds
    the device of the claim the scheduler made for it."""
    made = claim("shop", "ext-claim", [Allocated("hpre", HPRE_2, DRA_1)], pods=["ext"])
    api.seed("resourceclaims", made)
    placed = pod("shop", "ext", node_name=DRA_1, limits={"openfuyao.com/kae.hpre": "1"})
    placed["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "ext-claim"}
    api.seed("pods", placed)
    found = why(api, tmp_path, "ext")
    assert found["summary"] == "pod shop/ext is placed (Pending) on worker-1"
    assert [(h["claim"], h["device"], h["healthy"]) for h in found["holds"]] == [
        ("shop/ext-claim", HPRE_2, True)
    ]


def test_an_older_pool_generation_is_not_counted(api: HttpApiServer, tmp_path: Path) -> None:
    """A slice left from generation 1 beside the pool's generation 2 is on its way out: the
    scheduler ignores it, and so does nodes."""
    for obj in dra_slices("kunpeng920-2p", "worker-5"):
        old = copy.deepcopy(obj)
        old["metadata"]["name"] += "-old"
        api.seed("resourceslices", old)
        obj["spec"]["pool"]["generation"] = 2
        obj["spec"]["devices"] = [d for d in obj["spec"]["devices"] if d["name"].startswith("sec")]
        api.seed("resourceslices", obj)
    found = json.loads(kubectl_kae(api, tmp_path, "nodes", "-o", "json").stdout)
    (worker_5,) = [n for n in found if n["node"] == "worker-5"]
    assert set(worker_5["engines"]) == {"sec"}
