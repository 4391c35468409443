"""``kubectl kae why``: per node and request, why a pending pod's KAE devices cannot be placed
(the refusals of issue 30: an algorithm no device has, a NUMA pair that cannot exist, a tainted
device, exhausted queues), and what a placed pod holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.kubectl.cluster import (
    DRA_1,
    DRA_2,
    HPRE_0,
    HPRE_CLASS,
    PLUGIN,
    SEC_0,
    SEC_CLASS,
    ZIP_0,
    ZIP_2,
    ZIP_CLASS,
    claim,
    dra_slices,
    exactly,
    kubectl_kae,
    node,
    pod,
    selector,
    template,
)
from tests.support.dra_claims import Result as Allocated
from tests.support.http_apiserver import HttpApiServer

KAE = "kae.openfuyao.com"
SM2 = f'device.attributes["{KAE}"].alg_sm2'
NUMA = "resource.kubernetes.io/numaNode"


def pending_with(api: HttpApiServer, name: str, devices: dict[str, Any], **pod_args: Any) -> None:
    """A template ``name`` with ``devices`` and a pending pod ``name`` in shop using it."""
    api.seed("resourceclaimtemplates", template("shop", name, devices))
    ref = {"name": "kae", "resourceClaimTemplateName": name}
    api.seed("pods", pod("shop", name, claims=[ref], **pod_args))


def why(api: HttpApiServer, tmp_path: Path, name: str, namespace: str = "shop") -> dict[str, Any]:
    result = kubectl_kae(api, tmp_path, "why", f"pod/{name}", "-n", namespace, "-o", "json")
    assert result.exit_code == 0, result.output
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def reasons(found: dict[str, Any]) -> dict[str, list[str]]:
    return {n["node"]: n["reasons"] for n in found["nodes"]}


def test_an_algorithm_no_device_has(api: HttpApiServer, tmp_path: Path) -> None:
    """alg_sm2 is published false on every HPRE: the class leaves two, the selector none."""
    pending_with(
        api, "sm2", {"requests": [exactly("crypto", HPRE_CLASS, selectors=[selector(SM2)])]}
    )
    found = why(api, tmp_path, "sm2")
    assert found["summary"] == "pod shop/sm2 is not placed: no node can give it its KAE devices"
    assert found["asks"] == ["template shop/sm2"]
    on_1 = reasons(found)[DRA_1]
    assert on_1[0].startswith(f"request crypto: class {HPRE_CLASS}: 6 devices, 2 pass `")
    assert on_1[1:] == [
        f"request crypto: 2 hpre devices, 0 pass `{SM2}`",
        "request crypto: needs 1, 0 usable",
    ]
    assert reasons(found)[PLUGIN] == [
        "device-plugin node: ResourceClaims are allocated on DRA nodes only"
    ]
    assert reasons(found)["plain-1"] == [
        "no KAE devices",
        "opted out: openfuyao.com/kae.deploy.device-plugin=false",
    ]
    assert not any(n["fits"] for n in found["nodes"])


def test_a_numa_pair_that_cannot_exist(api: HttpApiServer, tmp_path: Path) -> None:
    """RSA and cipher on one NUMA node, the cipher on NUMA 0: worker-1's free HPRE is on NUMA 2
    (the NUMA 0 one is allocated), so each request alone is met and the pair is not."""
    devices = {
        "requests": [
            exactly("rsa", HPRE_CLASS, selectors=[selector(f'device.attributes["{KAE}"].alg_rsa')]),
            exactly(
                "cipher",
                SEC_CLASS,
                selectors=[selector('device.attributes["resource.kubernetes.io"].numaNode == 0')],
            ),
        ],
        "constraints": [{"matchAttribute": NUMA}],
    }
    pending_with(api, "pair", devices)
    on_1 = reasons(why(api, tmp_path, "pair"))[DRA_1]
    assert on_1[-1] == (
        f"template shop/pair: no two devices meet matchAttribute {NUMA} "
        "(rsa: numaNode 2; cipher: numaNode 0)"
    )
    assert f"request rsa: {HPRE_0} allocated to team-a/c1 (pod app-1)" in on_1


def test_two_devices_of_one_request_on_one_numa_node(api: HttpApiServer, tmp_path: Path) -> None:
    """Two HPREs on one NUMA node, on a node whose HPREs are on NUMA 0 and 2: never."""
    api.seed("nodes", node("worker-4"))
    for obj in dra_slices("kunpeng920-2p", "worker-4"):
        api.seed("resourceslices", obj)
    pending_with(api, "two", {"requests": [exactly("pair", HPRE_CLASS, count=2)],
                              "constraints": [{"matchAttribute": NUMA}]})  # fmt: skip
    found = reasons(why(api, tmp_path, "two"))
    assert found["worker-4"][-1] == (
        f"template shop/two: no two devices meet matchAttribute {NUMA} (pair: numaNode 0, 2)"
    )


def test_tainted_devices_unless_the_request_tolerates_them(
    api: HttpApiServer, tmp_path: Path
) -> None:
    """worker-2's SECs are tainted unhealthy; a request tolerating the taint may take them."""
    pending_with(api, "sec", {"requests": [exactly("cipher", SEC_CLASS, count=2)]})
    on_2 = reasons(why(api, tmp_path, "sec"))[DRA_2]
    assert f"request cipher: {SEC_0} tainted {KAE}/unhealthy=isolated" in on_2
    assert on_2[-1] == "request cipher: needs 2, 0 usable"
    tolerate = [{"key": f"{KAE}/unhealthy", "operator": "Exists"}]
    pending_with(
        api,
        "sec-tolerating",
        {"requests": [exactly("cipher", SEC_CLASS, count=2, tolerations=tolerate)]},
    )
    found = why(api, tmp_path, "sec-tolerating")
    assert {n["node"] for n in found["nodes"] if n["fits"]} == {DRA_1, DRA_2}
    assert "though its KAE devices fit on worker-1, worker-2" in found["summary"]


def test_exhausted_queues(api: HttpApiServer, tmp_path: Path) -> None:
    """Shares took 253 of one ZIP's 256 queues and 250 of the other's: 8 asked, 3 and 6 free;
    300 asked is more than a device has."""
    takes = [Allocated("zip", ZIP_0, DRA_1, share_id="s1", consumed_queues="245"),
             Allocated("zip", ZIP_2, DRA_1, share_id="s2", consumed_queues="250")]  # fmt: skip
    api.seed("resourceclaims", claim("team-b", "z2", takes, pods=["bulk"]))
    queues = {"requests": {"queues": "8"}}
    pending_with(api, "zip8", {"requests": [exactly("zip", ZIP_CLASS, capacity=queues)]})
    on_1 = reasons(why(api, tmp_path, "zip8"))[DRA_1]
    assert on_1[1:] == [
        f"request zip: {ZIP_0} asks 8 queues, 3 free",
        f"request zip: {ZIP_2} asks 8 queues, 6 free",
        "request zip: needs 1, 0 usable",
    ]
    queues = {"requests": {"queues": "300"}}
    pending_with(api, "zip300", {"requests": [exactly("zip", ZIP_CLASS, capacity=queues)]})
    on_2 = reasons(why(api, tmp_path, "zip300"))[DRA_2]
    assert f"request zip: {ZIP_2} asks 300 queues, 256 free (a claim may take at most 256)" in on_2


def test_extended_resource_limits_per_node(api: HttpApiServer, tmp_path: Path) -> None:
    """3 HPREs by limits: the device-plugin node counts allocatable against its pods, the DRA
    nodes go through the class whose extendedResourceName is openfuyao.com/kae.hpre."""
    api.seed("pods", pod("shop", "ext", limits={"openfuyao.com/kae.hpre": "3"}))
    found = why(api, tmp_path, "ext")
    assert found["asks"] == ["openfuyao.com/kae.hpre: 3"]
    assert reasons(found)[PLUGIN] == [
        "openfuyao.com/kae.hpre: asks 3, allocatable 2, 1 held, 1 free"
    ]
    assert reasons(found)[DRA_1][-1] == "request hpre: needs 3, 1 usable"


def test_node_level_causes_come_first(api: HttpApiServer, tmp_path: Path) -> None:
    """A nodeSelector the node lacks and a required affinity that names another node."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [DRA_2]}]}]}}}  # fmt: skip
    spec = {"nodeSelector": {"disk": "ssd"}, "affinity": affinity}
    pending_with(api, "picky", {"requests": [exactly("cipher", SEC_CLASS)]}, spec=spec)
    found = reasons(why(api, tmp_path, "picky"))
    assert found[DRA_1] == [
        "nodeSelector disk=ssd: the node has <none>",
        "required node affinity: no nodeSelectorTerm matches the node",
    ]
    assert found[DRA_2][0] == "nodeSelector disk=ssd: the node has <none>"


def test_selector_errors_and_missing_objects_are_named(api: HttpApiServer, tmp_path: Path) -> None:
    """A key no device has (the scheduler's CEL runtime error), a class and a template that do
    not exist."""
    bad = f'device.attributes["{KAE}"].alg_nothing'
    pending_with(api, "typo", {"requests": [
        exactly("crypto", HPRE_CLASS, selectors=[selector(bad)]),
        exactly("other", "nope.kae.openfuyao.com"),
    ]})  # fmt: skip
    on_1 = reasons(why(api, tmp_path, "typo"))[DRA_1]
    assert on_1[1].startswith(f"request crypto: 2 hpre devices, 0 pass `{bad}`; fails on 2: ")
    assert "alg_nothing" in on_1[1]
    assert "request other: DeviceClass nope.kae.openfuyao.com does not exist" in on_1
    api.seed(
        "pods", pod("shop", "orphan", claims=[{"name": "k", "resourceClaimTemplateName": "gone"}])
    )
    assert reasons(why(api, tmp_path, "orphan"))[DRA_1] == ["template shop/gone: does not exist"]


def test_a_running_pod_shows_what_it_holds(api: HttpApiServer, tmp_path: Path) -> None:
    """The claim's device with its health; a device-plugin pod its count."""
    ref = {"name": "kae", "resourceClaimName": "c1"}
    api.seed("pods", pod("team-a", "app-1", node_name=DRA_1, phase="Running", claims=[ref]))
    found = why(api, tmp_path, "app-1", "team-a")
    assert found["summary"] == "pod team-a/app-1 runs on worker-1"
    assert found["holds"] == [{
        "claim": "team-a/c1", "request": "rsa", "node": DRA_1, "device": HPRE_0,
        "engine": "hpre", "healthy": True, "reasons": [],
    }]  # fmt: skip
    assert found["nodes"] == []
    plugin = why(api, tmp_path, "dp-app")
    assert plugin["holds"] == [{"resource": "openfuyao.com/kae.hpre", "count": 1, "node": PLUGIN}]
    text = kubectl_kae(api, tmp_path, "why", "pod/app-1", "-n", "team-a").stdout
    assert f"  holds worker-1/{HPRE_0} (hpre, healthy) for request rsa of team-a/c1" in text


def test_a_pod_whose_claim_is_allocated_elsewhere(api: HttpApiServer, tmp_path: Path) -> None:
    """A shared claim already allocated on worker-1: every other node is ruled out by it."""
    ref = {"name": "kae", "resourceClaimName": "c1"}
    api.seed("pods", pod("team-a", "second", claims=[ref]))
    found = why(api, tmp_path, "second", "team-a")
    assert reasons(found)[DRA_2] == [
        "claim team-a/c1: allocated on worker-1: the pod can only go there"
    ]
    assert reasons(found)[DRA_1] == []


def test_a_pod_without_kae_asks(api: HttpApiServer, tmp_path: Path) -> None:
    """Nothing to explain, said in one line, exit 0."""
    api.seed("pods", pod("shop", "web"))
    found = why(api, tmp_path, "web")
    assert found["summary"] == "pod shop/web asks for no KAE devices"
    assert found["nodes"] == [] and found["holds"] == []


def test_the_table_form(api: HttpApiServer, tmp_path: Path) -> None:
    """The summary, the asks, a block per KAE node, one line for the others."""
    pending_with(
        api, "sm2", {"requests": [exactly("crypto", HPRE_CLASS, selectors=[selector(SM2)])]}
    )
    result = kubectl_kae(api, tmp_path, "why", "sm2", "-n", "shop")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:3] == [
        "pod shop/sm2 is not placed: no node can give it its KAE devices",
        "  asks template shop/sm2",
        "node worker-1 (dra): cannot place it",
    ]
    assert f"  request crypto: 2 hpre devices, 0 pass `{SM2}`" in lines
    opted_out = "opted out: openfuyao.com/kae.deploy.device-plugin=false"
    assert lines[-1] == f"nodes with no KAE devices: plain-1 ({opted_out})"
