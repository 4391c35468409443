"""The CEL of the chart's DRA objects, evaluated (cel-python, standard CEL) the way the API server
runs a ValidatingAdmissionPolicy: match conditions, then the variables in order, then every
validation. The real API server adds Kubernetes' own CEL libraries and type checking, which the
lead's cluster run covers; these tests pin down the logic: who is matched, and which ResourceSlice
writes pass. Also the DeviceClass selectors, against devices as the driver publishes them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import celpy
import pytest
from celpy import celtypes
from celpy.adapter import json_to_cel

from kae_deviceplugin.discovery.queues import QueueTotals
from kae_deviceplugin.dra.slices import NodeRef, build_slices
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.deploy.test_chart_dra import DRA, ENGINES
from tests.deploy.test_deploy import of_kind, render
from tests.dra.inventories import tree_inventory

NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
DRIVER_USER = "system:serviceaccount:kae-system:kae-kae-device-plugin"


def evaluate(expression: str, activation: Mapping[str, Any]) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression)).evaluate(dict(activation))


def admit(policy: dict[str, Any], request: dict[str, Any], obj: Any, old: Any) -> str | None:
    """None when the policy admits the request (or does not match it), else the denial message."""
    spec = policy["spec"]
    activation: dict[str, Any] = {
        "request": json_to_cel(request),
        "object": json_to_cel(obj),
        "oldObject": json_to_cel(old),
    }
    if not all(evaluate(c["expression"], activation) for c in spec["matchConditions"]):
        return None
    variables = celtypes.MapType()
    for variable in spec["variables"]:
        activation["variables"] = variables
        variables[celtypes.StringType(variable["name"])] = evaluate(
            variable["expression"], activation
        )
    activation["variables"] = variables
    for validation in spec["validations"]:
        if not evaluate(validation["expression"], activation):
            if "messageExpression" in validation:
                return str(evaluate(validation["messageExpression"], activation))
            return str(validation["message"])
    return None


def request(operation: str, node: str | None, user: str = DRIVER_USER) -> dict[str, Any]:
    """An admission request's fields the policy reads; ``node`` the token's node name."""
    user_info: dict[str, Any] = {"username": user, "groups": ["system:serviceaccounts"]}
    if node is not None:
        user_info["extra"] = {NODE_NAME_KEY: [node]}
    return {"operation": operation, "userInfo": user_info}


def slice_on(node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": "kae.openfuyao.com", "pool": {"name": node or "all"}}
    if node is not None:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "spec": spec}


def named_policy(suffix: str) -> dict[str, Any]:
    """The chart's admission policy whose name ends with ``suffix``."""
    [found] = [
        p
        for p in of_kind(render(None, DRA), "ValidatingAdmissionPolicy")
        if p["metadata"]["name"].endswith(suffix)
    ]
    return found


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    return named_policy("-own-node-slices")


def test_the_driver_writes_its_own_nodes_slices(policy: dict[str, Any]) -> None:
    """Create, update and delete of a slice of the pod's own node pass."""
    mine = slice_on("n1")
    assert admit(policy, request("CREATE", "n1"), mine, None) is None
    assert admit(policy, request("UPDATE", "n1"), mine, mine) is None
    assert admit(policy, request("DELETE", "n1"), None, mine) is None


@pytest.mark.parametrize(
    ("operation", "new", "old"),
    [
        ("CREATE", "n2", None),
        ("DELETE", None, "n2"),
        ("UPDATE", "n2", "n2"),
        ("UPDATE", "n1", "n2"),  # taking another node's slice over
        ("UPDATE", "n2", "n1"),  # handing its own slice to another node
    ],
)
def test_the_driver_cannot_touch_another_nodes_slices(
    policy: dict[str, Any], operation: str, new: str | None, old: str | None
) -> None:
    """Any write whose new or old slice is on another node is denied, naming both nodes."""
    obj = slice_on(new) if new else None
    old_obj = slice_on(old) if old else None
    denied = admit(policy, request(operation, "n1"), obj, old_obj)
    assert denied is not None and "n1" in denied and "n2" in denied, denied


def test_a_slice_for_no_single_node_is_denied(policy: dict[str, Any]) -> None:
    """A slice without spec.nodeName (allNodes) is no node's: the driver may not write one."""
    assert admit(policy, request("CREATE", "n1"), slice_on(None), None) is not None


@pytest.mark.parametrize("extra", [None, {}, {NODE_NAME_KEY: []}])
def test_a_token_without_a_node_is_denied(policy: dict[str, Any], extra: Any) -> None:
    """No node-name extra (a kubeconfig token, an old API server): denied, saying what to do."""
    req = request("CREATE", None)
    if extra is not None:
        req["userInfo"]["extra"] = extra
    denied = admit(policy, req, slice_on("n1"), None)
    assert denied is not None and "dra.nodeScopedPolicy=false" in denied


@pytest.mark.parametrize("user", ["system:node:n2", "system:serviceaccount:other:driver", "admin"])
def test_other_users_are_not_matched(policy: dict[str, Any], user: str) -> None:
    """The kubelet, other drivers and people are not this policy's business."""
    req = request("DELETE", None, user=user)
    assert admit(policy, req, None, slice_on("n9")) is None


def device(engine: str, driver: str = "kae.openfuyao.com") -> dict[str, Any]:
    """A device as the CEL environment of a DeviceClass selector sees it."""
    attributes = {"engine": engine, "function": "pf", "alg_rsa": engine == "hpre"}
    return {"driver": driver, "attributes": {"kae.openfuyao.com": attributes}}


def test_each_device_class_selects_its_engine_of_our_driver_only() -> None:
    """hpre.kae.openfuyao.com takes HPRE devices of kae.openfuyao.com, and no others."""
    for cls in of_kind(render(None, DRA), "DeviceClass"):
        (selector,) = cls["spec"]["selectors"]
        expression = selector["cel"]["expression"]
        wanted = cls["metadata"]["name"].split(".")[0]
        for engine in ENGINES:
            selected = evaluate(expression, {"device": json_to_cel(device(engine))})
            assert bool(selected) == (engine == wanted), (wanted, engine)
        other = json_to_cel(device(wanted, driver="gpu.example.com"))
        assert not evaluate(expression, {"device": other})


def pooled(node: str, pool: str, driver: str = "kae.openfuyao.com") -> dict[str, Any]:
    """A slice of ``node`` in the pool named ``pool`` of ``driver``."""
    found = slice_on(node)
    found["spec"] |= {"driver": driver, "pool": {"name": pool, "generation": 9}}
    return found


def test_the_driver_writes_the_pool_it_publishes(policy: dict[str, Any], tmp_path: Path) -> None:
    """The slices the driver builds for its node (real ones, from a fixture node's scan) pass
    on create, update and delete: the pins take nothing the driver needs."""
    TREES["kunpeng920-2p"].build(tmp_path)
    inventory = tree_inventory(tmp_path)
    queues = QueueTotals(tmp_path / "sys").update(inventory)
    plan = build_slices(inventory, NodeRef("n1", "uid-1"), generation=3, queues=queues)
    assert plan.slices
    for body in plan.slices:
        assert admit(policy, request("CREATE", "n1"), body, None) is None
        assert admit(policy, request("UPDATE", "n1"), body, body) is None
        assert admit(policy, request("DELETE", "n1"), None, body) is None


@pytest.mark.parametrize(
    ("operation", "new", "old"),
    [
        ("CREATE", pooled("n1", "n2"), None),  # its own node's slice in another node's pool
        ("UPDATE", pooled("n1", "n2"), pooled("n1", "n1")),
        ("UPDATE", pooled("n1", "n1"), pooled("n1", "n2")),
        ("DELETE", None, pooled("n1", "n2")),
        ("CREATE", pooled("n1", "n1", "gpu.example.com"), None),  # another driver's slice
        ("DELETE", None, pooled("n1", "n1", "gpu.example.com")),
    ],
)
def test_the_pool_and_the_driver_are_pinned(
    policy: dict[str, Any], operation: str, new: Any, old: Any
) -> None:
    """A slice of the driver's own node is still denied when its pool is not named after that
    node or its driver is not ours, new or old: otherwise a newer generation in node n2's pool
    would make n2's pool look outdated. The denial names what it found."""
    denied = admit(policy, request(operation, "n1"), new, old)
    assert denied is not None, (operation, new, old)
    wrong = next(o for o in (new, old) if o and o["spec"] != pooled("n1", "n1")["spec"])
    assert wrong["spec"]["pool"]["name"] in denied and wrong["spec"]["driver"] in denied


def claim_on(node: str, entries: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A ResourceClaim allocated on ``node`` (the node selector the scheduler writes), with
    ``entries`` as its status.devices."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    status: dict[str, Any] = {"allocation": {"nodeSelector": {"nodeSelectorTerms": [term]}}}
    if entries is not None:
        status["devices"] = entries
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "status": status}


def entry(pool: str, driver: str = "kae.openfuyao.com") -> dict[str, Any]:
    return {"driver": driver, "pool": pool, "device": "hpre-0000-79-00-0"}


def test_the_driver_writes_the_status_of_claims_on_its_node_only() -> None:
    """The claim-status policy: the status of a claim allocated on the driver's node, with
    entries of its pool (and another driver's, left alone), is admitted; a claim allocated on
    another node, an entry for another node's pool, or a token without a node is denied."""
    claims = named_policy("-own-node-claims")
    here = request("UPDATE", "node-a")
    ours = claim_on("node-a", [entry("node-a"), entry("elsewhere", "gpu.example.com")])
    assert admit(claims, here, ours, claim_on("node-a")) is None
    denied = admit(claims, here, claim_on("node-b", [entry("node-b")]), claim_on("node-b"))
    assert denied is not None and "allocated on its own node" in denied
    denied = admit(claims, here, claim_on("node-a", [entry("node-b")]), claim_on("node-a"))
    assert denied is not None and "its own node's pool" in denied
    assert admit(claims, request("UPDATE", None), ours, claim_on("node-a")) is not None
    assert admit(claims, request("UPDATE", "node-a", user="someone"), ours, ours) is None
