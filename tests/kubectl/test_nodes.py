"""``kubectl kae nodes``: per node and engine, total/healthy/allocated/free, read over HTTP
from the test API server holding the driver's real slices, claims and device-plugin pods."""

from __future__ import annotations

import json
from pathlib import Path

from tests.kubectl.cluster import DRA_1, HPRE_2, PLUGIN, claim, kubectl_kae, pod
from tests.support.dra_claims import Result as Allocated
from tests.support.http_apiserver import HttpApiServer


def _counts(total: int, healthy: int, allocated: int, free: int) -> dict[str, int]:
    return {"total": total, "healthy": healthy, "allocated": allocated, "free": free}


EXPECTED = [
    {
        "node": "worker-1",
        "mode": "dra",
        "engines": {
            "hpre": _counts(2, 2, 1, 1),  # hpre-0000-79-00-0 held by team-a/c1
            "sec": _counts(2, 2, 0, 2),
            "zip": _counts(2, 2, 1, 1),  # a share of zip-0000-75-00-0 held by team-b/z1
        },
    },
    {
        "node": "worker-2",
        "mode": "dra",
        "engines": {  # the faults tree: every device tainted unhealthy but one ZIP
            "hpre": _counts(2, 0, 0, 0),
            "sec": _counts(3, 0, 0, 0),
            "zip": _counts(2, 1, 0, 1),
        },
    },
    {
        "node": "worker-3",
        "mode": "device-plugin",
        "engines": {  # one running pod holds an HPRE (the succeeded one no longer does)
            "hpre": _counts(2, 2, 1, 1),
            "sec": _counts(2, 1, 0, 1),  # allocatable 1 of capacity 2: one unhealthy
            "zip": _counts(2, 2, 0, 2),
        },
    },
]


def test_json_lists_each_kae_node_with_its_mode_and_engine_counts(
    api: HttpApiServer, tmp_path: Path
) -> None:
    """DRA nodes from their slices and claims, the device-plugin node from capacity,
    allocatable and its running pods; the node without KAE devices is not listed."""
    result = kubectl_kae(api, tmp_path, "nodes", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == EXPECTED


def test_the_table_has_one_row_per_node(api: HttpApiServer, tmp_path: Path) -> None:
    """Default output: a header and one row per node, engines as total/healthy/allocated/free."""
    result = kubectl_kae(api, tmp_path, "nodes")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "NODE       MODE            HPRE T/H/A/F   SEC T/H/A/F   ZIP T/H/A/F",
        "worker-1   dra             2/2/1/1        2/2/0/2       2/2/1/1",
        "worker-2   dra             2/0/0/0        3/0/0/0       2/1/0/1",
        "worker-3   device-plugin   2/2/1/1        2/1/0/1       2/2/0/2",
    ]


def test_new_claims_and_pods_change_the_counts(api: HttpApiServer, tmp_path: Path) -> None:
    """A second HPRE claim on worker-1 leaves it no free HPRE; a second device-plugin pod
    (asking through an init container, which counts) leaves worker-3 none either."""
    api.seed("resourceclaims", claim("team-c", "c2", [Allocated("rsa", HPRE_2, DRA_1)]))
    init = pod("shop", "dp-init", node_name=PLUGIN, phase="Pending")
    init["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"openfuyao.com/kae.hpre": "1"}}}
    ]
    api.seed("pods", init)
    found = {n["node"]: n["engines"]["hpre"] for n in json.loads(
        kubectl_kae(api, tmp_path, "nodes", "-o", "json").stdout
    )}  # fmt: skip
    assert found["worker-1"] == _counts(2, 2, 2, 0)
    assert found["worker-3"] == _counts(2, 2, 2, 0)


def test_pods_are_listed_only_for_device_plugin_nodes(api: HttpApiServer, tmp_path: Path) -> None:
    """nodes lists the pods of the one device-plugin node (one request, by spec.nodeName),
    devices lists no pods at all: a large cluster's every pod is not read for a few counts."""
    assert kubectl_kae(api, tmp_path, "devices").exit_code == 0
    assert api.faults.count("list", "pods") == 0
    assert kubectl_kae(api, tmp_path, "nodes").exit_code == 0
    assert api.faults.count("list", "pods") == 1
