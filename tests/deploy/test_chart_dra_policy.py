"""The CEL of the chart's DRA objects, evaluated (cel-python, standard CEL) the way the API server
runs a ValidatingAdmissionPolicy: match conditions, then the variables in order, then every
validation. The real API server adds Kubernetes' own CEL libraries and type checking, which the
lead's cluster run covers; these tests pin down the logic: who is matched, and which ResourceSlice
writes pass. Also the DeviceClass selectors, against devices as the driver publishes them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import celpy
import pytest
from celpy import celtypes
from celpy.adapter import json_to_cel

from tests.deploy.test_chart_dra import DRA, ENGINES
from tests.deploy.test_deploy import of_kind, one, render

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


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    found: dict[str, Any] = one(render(None, DRA), "ValidatingAdmissionPolicy")
    return found


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
