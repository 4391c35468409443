"""A second ``serve --mode dra`` on a node whose sockets a live instance serves (two host
processes without ``POD_UID``, an operator's slip): it exits 3, and the live instance keeps its
sockets and goes on serving the kubelet (issue 36: the second one's shutdown unlinked them).
"""

from __future__ import annotations

from tests.dra.node import HPRE_0
from tests.support.dra_claims import Result, claim_object
from tests.support.dra_kubelet import Claim
from tests.support.dra_process import NODE, DraNode, dra_process
from tests.support.http_apiserver import HttpApiServer

DEADLINE = 10.0


def test_a_second_instance_exits_3_and_leaves_the_live_ones_sockets(
    api: HttpApiServer, node: DraNode
) -> None:
    """The second instance refuses the served names and exits 3; the first one's service and
    registration sockets are the same files afterwards, and a claim is prepared through them."""
    api.seed_node(NODE)
    claim = api.seed("resourceclaims", claim_object("team-a", "c1", [Result("hpre", HPRE_0, NODE)]))
    ref = Claim("team-a", "c1", claim["metadata"]["uid"])
    with dra_process(node, api) as first:
        first.register()
        sockets = (first.service_socket, first.registration_socket)
        before = [p.stat().st_ino for p in sockets]
        with dra_process(node, api, tag="second") as second:
            assert second.process.wait(DEADLINE) == 3, second.describe()
            assert any("another live process" in line for line in second.log_lines())
        assert [p.stat().st_ino for p in sockets] == before, first.describe()
        assert first.prepare([ref])[ref.uid].error == "", first.describe()
        assert first.alive and first.terminate() == 0, first.describe()
