"""Prepare and unprepare of shares of a shared device (consumable capacity): two claims on one
ZIP, each with its share ID and its queues, on a real fixture tree, CDI dir and checkpoint."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import jsonschema
import pytest

from kae_deviceplugin.dra.claims import ClaimRef, allocated_devices
from kae_deviceplugin.errors import ClaimRefused
from kae_deviceplugin.testing.cdi_container import run_container
from tests.container.test_cdi import CDI_SCHEMA
from tests.dra.node import HPRE_0, KIND, POOL, Node, add_claim, build_node
from tests.support.dra_claims import Result, claim_object

ZIP_0 = "zip-0000-75-00-0"  # hisi_zip-4, NUMA node 0
SHARE_A = "0b8f9a52-1d3c-4e6f-8a7b-9c0d1e2f3a4b"
SHARE_B = "7e6d5c4b-3a29-4817-a6b5-c4d3e2f1a0b9"
COMP_PARTS = ("sync-comp", "sync-decomp", "async-comp", "async-decomp")


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return build_node(tmp_path)


def _request_env(node: Node, uid: str, request: str) -> list[str]:
    devices = node.spec(uid)["devices"]
    assert isinstance(devices, list)
    [entry] = [d for d in devices if d["name"] == f"{uid}_{request}"]
    env: list[str] = entry["containerEdits"]["env"]
    return env


def test_two_claims_share_one_zip_with_their_own_names_and_queues(node: Node) -> None:
    """8 and 16 queues of one ZIP: both prepared, CDI names carry the claim UID and the share
    ID, each container gets KAE_ZIP_QUEUES and WD_COMP_CTX_NUM sized to its share (a queue per
    context, four parts), and the checkpoint records share IDs and queues."""
    a = add_claim(node, "a", Result("zip", ZIP_0, POOL, share_id=SHARE_A, consumed_queues="8"))
    b = add_claim(node, "b", Result("zip", ZIP_0, POOL, share_id=SHARE_B, consumed_queues="16"))
    answers = asyncio.run(node.preparer().prepare([a, b]))
    assert {uid: answer.error for uid, answer in answers.items()} == {a.uid: "", b.uid: ""}
    [device_a] = answers[a.uid].devices
    [device_b] = answers[b.uid].devices
    assert device_a.cdi_ids[0] == f"{KIND}={a.uid}-{ZIP_0}-{SHARE_A}"
    assert device_b.cdi_ids[0] == f"{KIND}={b.uid}-{ZIP_0}-{SHARE_B}"
    assert (device_a.result.share_id, device_b.result.share_id) == (SHARE_A, SHARE_B)
    for claim, queues in ((a, 8), (b, 16)):
        jsonschema.validate(node.spec(claim.uid), CDI_SCHEMA)
        env = _request_env(node, claim.uid, "zip")
        assert f"KAE_ZIP_QUEUES={queues}" in env
        each = queues // 4
        comp = ",".join(f"{part}:{each}@0" for part in COMP_PARTS)
        assert f"WD_COMP_CTX_NUM={comp}" in env
        assert "KAE_ZIP_DEVICES=hisi_zip-4" in env
    recorded = node.checkpoint.load().claims
    assert [(d.share_id, d.queues) for d in recorded[a.uid].devices] == [(SHARE_A, 8)]
    assert [(d.share_id, d.queues) for d in recorded[b.uid].devices] == [(SHARE_B, 16)]


def test_unprepare_of_one_share_needs_only_the_checkpoint_and_leaves_the_other(node: Node) -> None:
    """The claim is gone from the API: its spec and record go, the other share's stay."""
    a = add_claim(node, "a", Result("zip", ZIP_0, POOL, share_id=SHARE_A, consumed_queues="8"))
    b = add_claim(node, "b", Result("zip", ZIP_0, POOL, share_id=SHARE_B, consumed_queues="8"))
    asyncio.run(node.preparer().prepare([a, b]))
    node.store.delete("team-a", "a")
    restarted = node.preparer()  # a new daemon: only the checkpoint knows the claims
    assert asyncio.run(restarted.unprepare([a])) == {a.uid: ""}
    assert not node.spec_path(a.uid).exists() and node.spec_path(b.uid).exists()
    assert set(node.checkpoint.load().claims) == {b.uid}


def test_two_shares_of_one_device_in_one_claim_never_define_one_name_twice(node: Node) -> None:
    """Two requests of one claim on the same ZIP (two shares): two device entries, one per
    share ID, and the spec is valid CDI."""
    claim = add_claim(
        node,
        "both",
        Result("in", ZIP_0, POOL, share_id=SHARE_A, consumed_queues="4"),
        Result("out", ZIP_0, POOL, share_id=SHARE_B, consumed_queues="4"),
    )
    answer = asyncio.run(node.preparer().prepare([claim]))[claim.uid]
    assert answer.error == ""
    spec = node.spec(claim.uid)
    jsonschema.validate(spec, CDI_SCHEMA)
    devices = spec["devices"]
    assert isinstance(devices, list)
    names = [d["name"] for d in devices]
    assert len(names) == len(set(names)) == 4
    assert "KAE_ZIP_QUEUES=4" in _request_env(node, claim.uid, "in")


@pytest.mark.parametrize(("written", "queues"), [("8", 8), ("1k", 1000), ("2Ki", 2048)])
def test_consumed_queues_are_read_in_any_quantity_spelling(written: str, queues: int) -> None:
    """The API writes quantities canonically (1000 as 1k): the count is the number."""
    result = Result("zip", ZIP_0, POOL, share_id=SHARE_A, consumed_queues=written)
    obj = claim_object("team-a", "c", [result], uid="u-1")
    [device] = allocated_devices(obj, ClaimRef("team-a", "c", "u-1"), POOL)
    assert device.queues == queues and device.share_id == SHARE_A


@pytest.mark.parametrize("written", ["-1", "1.5", "lots"])
def test_a_consumed_capacity_that_is_not_a_count_refuses_the_claim(written: str) -> None:
    """A quantity that is no whole number of queues is the claim's error, named."""
    result = Result("zip", ZIP_0, POOL, share_id=SHARE_A, consumed_queues=written)
    obj = claim_object("team-a", "c", [result], uid="u-1")
    with pytest.raises(ClaimRefused, match="consumed queues"):
        allocated_devices(obj, ClaimRef("team-a", "c", "u-1"), POOL)


def test_an_unshared_device_has_no_queue_variables(node: Node) -> None:
    """Without consumedCapacity (an unshared device) there is no KAE_ZIP_QUEUES, and the WD_*
    variables stay the NUMA hint's one context per part."""
    claim = add_claim(node, "plain", Result("zip", ZIP_0, POOL))
    asyncio.run(node.preparer().prepare([claim]))
    env = _request_env(node, claim.uid, "zip")
    assert not any(v.startswith("KAE_ZIP_QUEUES=") for v in env)
    assert f"WD_COMP_CTX_NUM={','.join(f'{p}:1@0' for p in COMP_PARTS)}" in env


# The CDI parser's rule for a device name (container-device-interface pkg/parser, restated):
# letters and digits, with "-", "_", "." and ":" between them.
CDI_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")


def _share(device: str, queues: str) -> Result:
    return Result("r", device, POOL, share_id=SHARE_A, consumed_queues=queues)


def _refused(node: Node, *claims: ClaimRef) -> dict[str, str]:
    answers = asyncio.run(node.preparer().prepare(list(claims)))
    assert node.checkpoint.load().claims == {}
    assert not any(node.spec_path(c.uid).exists() for c in claims)
    return {uid: answer.error for uid, answer in answers.items()}


def test_a_share_larger_than_the_device_publishes_is_refused_naming_both(node: Node) -> None:
    """With ZIP shared, its published capacity is the limit: a share of 100,000 queues, one
    of 10^18 (1E) and two shares of one claim that fit alone but not together are each
    refused in one line naming the device and its limit; nothing is recorded or written. A
    share of exactly the limit is prepared."""
    node.shared_engines = frozenset({"zip"})
    limit = node.share_limits()[ZIP_0]
    assert isinstance(limit, int) and limit > 2
    huge = add_claim(node, "huge", _share(ZIP_0, "100000"))
    exa = add_claim(node, "exa", _share(ZIP_0, "1E"))
    half = str(limit // 2 + 1)
    pair = add_claim(
        node,
        "pair",
        Result("a", ZIP_0, POOL, share_id=SHARE_A, consumed_queues=half),
        Result("b", ZIP_0, POOL, share_id=SHARE_B, consumed_queues=half),
    )
    errors = _refused(node, huge, exa, pair)
    for uid, consumed in ((huge.uid, "100000"), (exa.uid, str(10**18)), (pair.uid, "")):
        error = errors[uid]
        assert ZIP_0 in error and f"publishes {limit} queues" in error, error
        assert consumed in error and "\n" not in error
    exact = Result("zip", ZIP_0, POOL, share_id=SHARE_A, consumed_queues=str(limit))
    whole = add_claim(node, "whole", exact)
    assert asyncio.run(node.preparer().prepare([whole]))[whole.uid].error == ""


def test_a_share_of_an_engine_that_is_not_shared_is_refused(node: Node) -> None:
    """HPRE is not in dra.sharedEngines (only ZIP is): a share of an HPRE device, with or
    without consumed queues, is refused naming the device and why it is not shared."""
    node.shared_engines = frozenset({"zip"})
    counted = add_claim(node, "c", _share(HPRE_0, "4"))
    bare = add_claim(node, "b", Result("hpre", HPRE_0, POOL, share_id=SHARE_B))
    for error in _refused(node, counted, bare).values():
        assert HPRE_0 in error and "engine hpre is not in dra.sharedEngines" in error, error


@pytest.mark.parametrize(
    ("request_name", "share_id"),
    [
        ("Bad_Request.x", "not a uuid/../x"),
        ("main/Sub_1", "tail:"),
        ("r" * 70 + " x", "UPPER"),
        ("ümlaut", "tail-"),
    ],
)
def test_cdi_names_are_made_of_valid_parts_only(
    node: Node, request_name: str, share_id: str
) -> None:
    """Request names and share IDs that are no DNS label never go verbatim into a CDI name:
    every name in the spec passes the CDI parser's rule and is unique, a runtime resolves
    every ID of the answer, and the kubelet still gets the share ID as the claim has it."""
    result = Result(request_name, ZIP_0, POOL, share_id=share_id, consumed_queues="4")
    claim = add_claim(node, "odd", result)
    answer = asyncio.run(node.preparer().prepare([claim]))[claim.uid]
    assert answer.error == ""
    devices = node.spec(claim.uid)["devices"]
    assert isinstance(devices, list)
    names = [d["name"] for d in devices]
    assert all(CDI_NAME.fullmatch(n) for n in names) and len(set(names)) == len(names), names
    jsonschema.validate(node.spec(claim.uid), CDI_SCHEMA)
    [device] = answer.devices
    assert device.result.share_id == share_id
    run_container(node.cdi_dir, list(device.cdi_ids))  # Unresolved if any ID is undefined
