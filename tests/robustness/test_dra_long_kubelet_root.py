"""The real ``serve --mode dra`` under kubelet roots whose socket paths pass the 107 bytes a
unix socket address holds: the shorter names upstream's helper falls back to, both rolling
instances reached through them, and a one-line refusal where no name fits."""

from __future__ import annotations

from kae_deviceplugin.dra.api import registration_names, service_names
from tests.dra.node import HPRE_0
from tests.support.dra_claims import Result, claim_object
from tests.support.dra_kubelet import Claim
from tests.support.dra_process import NODE, dra_node, dra_process, wait_until
from tests.support.http_apiserver import HttpApiServer

DEADLINE = 10.0
FIRST_UID = "6f1c1d2e-9a4b-4c3d-8e2f-1a2b3c4d5e6f"
SECOND_UID = "0b2c7a4e-1111-4222-8333-944445555666"


def test_two_rolling_instances_serve_under_a_54_byte_root(api: HttpApiServer) -> None:
    """A 54-byte root: neither the UID names nor the driver's digest name fit, so each pod
    registers as dra-<digest>-reg.sock and serves dra-<digest>.sock (bound in a private
    directory whose own path is too long, through /proc/self/fd). The kubelet reaches both
    through what GetInfo names, and one prepares a claim."""
    api.seed_node(NODE)
    claim = api.seed("resourceclaims", claim_object("team-a", "c1", [Result("hpre", HPRE_0, NODE)]))
    ref = Claim("team-a", "c1", claim["metadata"]["uid"])
    with (
        dra_node(kubelet_root_length=54) as node,
        dra_process(node, api, pod_uid=FIRST_UID) as first,
        dra_process(node, api, pod_uid=SECOND_UID) as second,
    ):
        for daemon, uid in ((first, FIRST_UID), (second, SECOND_UID)):
            assert daemon.registration_socket.name == registration_names(uid)[2]
            assert daemon.service_socket.name == service_names(uid)[1]
            info = daemon.register()
            assert info.endpoint == str(daemon.service_socket), daemon.describe()
            assert len(info.endpoint.encode()) <= 107
            assert daemon.service_socket.is_socket()
            assert daemon.wait_ready(), daemon.readyz()
        answer = first.prepare([ref])[ref.uid]
        assert answer.error == "" and [d.device for d in answer.devices] == [HPRE_0]
        assert second.unprepare([ref]) == {ref.uid: ""}
        assert not any("Traceback" in line for line in first.log_lines() + second.log_lines())


def test_a_121_byte_root_is_refused_in_one_line_with_exit_3(api: HttpApiServer) -> None:
    """The adversarial round's root: no traceback from gRPC's bind, but one line naming
    --kubelet-root, the 107-byte limit and the longest root that would do; exit code 3."""
    api.seed_node(NODE)
    with (
        dra_node(kubelet_root_length=121) as node,
        dra_process(node, api, pod_uid=FIRST_UID) as daemon,
    ):
        assert wait_until(lambda: not daemon.alive, DEADLINE), daemon.describe()
        assert daemon.process.returncode == 3, daemon.describe()
        lines = daemon.log_lines()
        assert not any("Traceback" in line or "Failed to bind" in line for line in lines)
        refusals = [line for line in lines if "cannot start" in line]
        assert len(refusals) == 1, daemon.describe()
        assert f"--kubelet-root {node.kubelet_root}: " in refusals[0]
        assert "over the 107" in refusals[0] and "at most 54 bytes" in refusals[0]
