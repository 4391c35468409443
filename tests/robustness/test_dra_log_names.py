"""Names from the kubelet and the API go into the log shortened: a claim named with a mebibyte
makes a log line of a few hundred bytes that says how long the name was, not one of 2 MiB."""

from __future__ import annotations

import uuid

from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.errors import clipped
from tests.support.dra_kubelet import Claim
from tests.support.dra_process import NODE, DraNode, dra_process
from tests.support.http_apiserver import HttpApiServer

MIB = 1 << 20
LINE_BOUND = 4096  # bytes: a line with a few clipped names, its cause and the timings


def test_a_claim_named_with_a_mebibyte_makes_bounded_log_lines(
    api: HttpApiServer, node: DraNode
) -> None:
    """NodePrepareResources for a claim whose namespace and name are 1 MiB each (read from the
    API, which does not know it) and one whose UID is 1 MiB (refused before asking): both are
    refused, no line of the daemon's log passes 4 KiB, and the lines that name the claim say
    how long its name was."""
    api.seed_node(NODE)
    named = Claim("n" * MIB, "c" * MIB, str(uuid.uuid4()))
    with_uid = Claim("team-a", "c1", "u" * MIB)
    with dra_process(node, api) as daemon:
        daemon.register()
        assert daemon.wait_ready(), daemon.readyz()
        answers = daemon.prepare([named, with_uid])
        assert answers[named.uid].error and answers[with_uid.uid].error
        assert daemon.wait_log("NodePrepareResources")
        assert daemon.terminate() == 0
    lines = daemon.log_path.read_bytes().splitlines()
    longest = max(lines, key=len)
    assert len(longest) <= LINE_BOUND, longest[:300]
    naming = [line for line in lines if b"cccc" in line]
    assert naming, "the refusal is logged"
    assert all(f"({MIB} characters)".encode() in line for line in naming)


def test_a_claim_ref_prints_each_part_clipped_with_its_length() -> None:
    """ClaimRef's text (what every log line and refusal of a claim uses): namespace and name
    whole when short; a long one keeps 200 characters and says how long it was."""
    assert str(ClaimRef("team-a", "c1", "u")) == "team-a/c1"
    long = str(ClaimRef("team-a", "c" * MIB, "u"))
    assert long == f"team-a/{'c' * 200}...({MIB} characters)"
    assert clipped("x" * 200) == "x" * 200 and clipped("x" * 201).endswith("(201 characters)")
