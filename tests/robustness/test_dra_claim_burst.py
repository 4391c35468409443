"""A burst of claims against the real DRA daemon (``serve --mode dra``) and the HTTP test API
server: the node's health still reaches its slices at once, every claim gets a cause, and the
next claim is served (issue 36: after 300 claims whose reads timed out, a device's health took
26.5 s to reach the API; after 1,000, 166 s, and new claims were refused all that time).

The server answers no claim read until the test releases them, as an API server under load
would not; the daemon's pacing must keep the pool's requests out of that queue.
"""

from __future__ import annotations

import threading
import uuid

from kae_deviceplugin.apiserver.paced import IN_FLIGHT
from kae_deviceplugin.testing.sysfs_builder import set_attribute
from tests.dra.node import HPRE_0, SEC_0
from tests.support.dra_claims import Result, claim_object
from tests.support.dra_kubelet import Claim, Prepared
from tests.support.dra_process import NODE, DraNode, device_names, dra_process
from tests.support.http_apiserver import HttpApiServer

DEADLINE = 10.0
BURST = 300  # claims in one NodePrepareResources call
SENT_AT_ONCE = IN_FLIGHT  # claim reads the claims' lane has under way at once
CLAIM_CALL = 60.0  # the daemon answers within its 30 s claim read limit


def tainted(api: HttpApiServer, device: str) -> bool:
    """``device`` is in the pool's slices with a taint."""
    return any(
        d["name"] == device and d.get("taints")
        for s in api.slices()
        for d in s["spec"].get("devices", [])
    )


def test_health_reaches_the_slices_during_a_burst_of_claims_and_every_claim_gets_a_cause(
    api: HttpApiServer, node: DraNode
) -> None:
    """300 claims at once whose reads the server holds: the device that turns unhealthy
    meanwhile is tainted in its slice while every claim read is still held; once the server
    answers, every claim of the burst has a non-empty error, and a claim asked after the burst
    is prepared."""
    api.seed_node(NODE)
    with dra_process(node, api) as daemon:
        daemon.register()
        assert api.wait_for(lambda: HPRE_0 in device_names(api.slices()), DEADLINE), (
            daemon.describe()
        )
        api.hold("get", "resourceclaims")
        burst = [Claim("team-a", f"burst-{i}", str(uuid.uuid4())) for i in range(BURST)]
        answers: dict[str, Prepared] = {}
        call = threading.Thread(target=lambda: answers.update(daemon.prepare(burst)))
        call.start()
        try:
            assert api.wait_for(
                lambda: api.faults.count("get", "resourceclaims") >= SENT_AT_ONCE, DEADLINE
            ), daemon.describe()
            set_attribute(node.root, "hisi_sec2-0", "isolate", "1")
            # Before issue 36's fix the slice write queued behind 280 claim reads: 56 s.
            assert api.wait_for(lambda: tainted(api, SEC_0), DEADLINE), daemon.describe()
            assert call.is_alive()  # the burst is still held: the taint did not wait for it
        finally:
            api.release()
            call.join(CLAIM_CALL)
        assert not call.is_alive()
        assert len(answers) == BURST
        # None prepared, and every error has its cause (a timeout's str() is empty).
        assert all(a.error and not a.error.rstrip().endswith(":") for a in answers.values())
        claim = api.seed(
            "resourceclaims", claim_object("team-a", "after", [Result("hpre", HPRE_0, NODE)])
        )
        after = Claim("team-a", "after", claim["metadata"]["uid"])
        assert daemon.prepare([after])[after.uid].error == ""
        assert daemon.terminate() == 0, daemon.describe()
