"""The DRAPlugin servicers on a real unix socket, driven by the DRA kubelet emulator."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra.claim_specs import ClaimAnswer
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.dra.plugin import Preparer
from tests.dra.node import HPRE_0, KIND, POOL, SEC_0, Node, add_claim, build_node
from tests.dra.serving import serving, socket_dir
from tests.support.dra_claims import Result
from tests.support.dra_kubelet import Claim, DRAKubelet


@pytest.fixture
def node() -> Iterator[Node]:
    with socket_dir() as root:
        yield build_node(root)


def _kubelet_claim(node: Node, name: str, *results: Result) -> Claim:
    ref = add_claim(node, name, *results)
    return Claim(ref.namespace, ref.name, ref.uid)


@pytest.mark.parametrize("service", ["v1.DRAPlugin", "v1beta1.DRAPlugin"])
def test_prepare_and_unprepare_through_the_socket(node: Node, service: str) -> None:
    """Both versions: the kubelet gets every claim back (devices with CDI IDs, or the error),
    and unprepare answers each claim; the share ID travels only in v1 (and names the CDI
    device in both: the spec is the same whichever version asked)."""
    share = "5a1c6f0e-3b7d-4c2a-9e8f-0123456789ab"
    good = _kubelet_claim(node, "good", Result("hpre", HPRE_0, POOL, share_id=share))
    bad = _kubelet_claim(node, "bad", Result("sec", "sec-0000-00-00-0", POOL))
    socket = node.root / "dra.sock"
    latest = LatestValue(node.inventory)

    async def scenario() -> None:
        async with (
            serving(socket, node.preparer(), latest, POOL),
            DRAKubelet(socket, plugin_service=service) as kubelet,
        ):
            answers = await kubelet.prepare([good, bad])
            (device,) = answers[good.uid].devices
            assert answers[good.uid].error == ""
            assert (device.pool, device.device, device.request_names) == (POOL, HPRE_0, ("hpre",))
            assert device.cdi_ids[0] == f"{KIND}={good.uid}-{HPRE_0}-{share}"
            assert device.share_id == (share if service == "v1.DRAPlugin" else None)
            assert "is not on this node" in answers[bad.uid].error
            assert await kubelet.unprepare([good, bad]) == {good.uid: "", bad.uid: ""}

    asyncio.run(scenario())
    assert not node.spec_path(good.uid).exists()


def test_two_engines_in_one_claim(node: Node) -> None:
    """One HPRE and one SEC of NUMA node 0 in one claim: one device each, in request order."""
    claim = _kubelet_claim(node, "pair", Result("hpre", HPRE_0, POOL), Result("sec", SEC_0, POOL))
    socket = node.root / "dra.sock"

    async def scenario() -> None:
        async with (
            serving(socket, node.preparer(), LatestValue(node.inventory), POOL),
            DRAKubelet(socket) as kubelet,
        ):
            answer = (await kubelet.prepare([claim]))[claim.uid]
            assert [d.device for d in answer.devices] == [HPRE_0, SEC_0]

    asyncio.run(scenario())


def test_a_fault_of_ours_fails_each_claim_not_the_call(node: Node) -> None:
    """An unexpected error inside prepare (here: discovery's value cannot be had) becomes an
    error of every claim asked, so the kubelet retries them."""
    claim = _kubelet_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    socket = node.root / "dra.sock"

    def broken() -> Inventory:
        raise RuntimeError("inventory unavailable")

    preparer = node.preparer()
    preparer.specs.inventory = broken

    async def scenario() -> None:
        async with (
            serving(socket, preparer, LatestValue(node.inventory), POOL),
            DRAKubelet(socket) as kubelet,
        ):
            answers = await kubelet.prepare([claim])
        assert "internal error" in answers[claim.uid].error
        assert "inventory unavailable" in answers[claim.uid].error

    asyncio.run(scenario())


def test_unprepare_after_a_restart_of_the_plugin(node: Node) -> None:
    """A claim prepared by one server instance is unprepared through a new one (the checkpoint
    is read at start), after the claim was deleted from the API."""
    claim = _kubelet_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    socket: Path = node.root / "dra.sock"
    latest = LatestValue(node.inventory)

    async def scenario() -> None:
        async with serving(socket, node.preparer(), latest, POOL), DRAKubelet(socket) as k:
            assert (await k.prepare([claim]))[claim.uid].error == ""
        node.store.delete(claim.namespace, claim.name)
        async with serving(socket, node.preparer(), latest, POOL), DRAKubelet(socket) as k:
            assert await k.unprepare([claim]) == {claim.uid: ""}

    asyncio.run(scenario())
    assert not node.spec_path(claim.uid).exists()
    assert node.checkpoint.load().claims == {}


class _Recording:
    """A preparer that notes when each call begins and ends, beside the ``answered`` hook."""

    def __init__(self, inner: Preparer) -> None:
        self.inner = inner
        self.events: list[str] = []

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimAnswer]:
        self.events.append("prepare")
        try:
            return await self.inner.prepare(claims)
        finally:
            self.events.append("prepared")

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        self.events.append("unprepare")
        try:
            return await self.inner.unprepare(claims)
        finally:
            self.events.append("unprepared")


@pytest.mark.parametrize("service", ["v1.DRAPlugin", "v1beta1.DRAPlugin"])
def test_answered_follows_each_call_once_it_is_over(node: Node, service: str) -> None:
    """The hook the claims' status hangs on runs once per call, after the call's answer was
    made (never while prepare runs), in both versions."""
    claim = _kubelet_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    recording = _Recording(node.preparer())
    answered = lambda: recording.events.append("answered")  # noqa: E731

    async def settled(count: int) -> None:
        while recording.events.count("answered") < count:
            await asyncio.sleep(0.01)

    async def scenario() -> None:
        socket = node.root / "dra.sock"
        async with (
            serving(socket, recording, LatestValue(node.inventory), POOL, answered=answered),
            DRAKubelet(socket, plugin_service=service) as kubelet,
        ):
            assert (await kubelet.prepare([claim]))[claim.uid].error == ""
            await asyncio.wait_for(settled(1), 30)
            assert await kubelet.unprepare([claim]) == {claim.uid: ""}
            await asyncio.wait_for(settled(2), 30)

    asyncio.run(scenario())
    assert recording.events == [
        "prepare", "prepared", "answered", "unprepare", "unprepared", "answered"
    ]  # fmt: skip
