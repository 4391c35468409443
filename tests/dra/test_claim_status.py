"""Claims' device status: after a prepare the claim's ``status.devices`` names each device
with its facts and the Ready and Healthy conditions; a health change rewrites it (keeping the
unchanged condition's time); an unprepare takes the entries back; nothing is written twice;
a refusal backs off, a claim the API server no longer has is forgotten."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.apiserver.seam import RESOURCE_CLAIMS
from kae_deviceplugin.core.backoff import Backoff
from kae_deviceplugin.core.model import Health, Inventory
from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.claim_status import device_statuses
from kae_deviceplugin.dra.claim_status_writer import ClaimStatusWriter
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.dra.prepare import ClaimPreparer
from kae_deviceplugin.errors import ApiError
from tests.dra.node import HPRE_0, POOL, Node, build_node
from tests.support.dra_claims import Result, claim_object
from tests.support.fake_apiserver import FakeApiServer


@pytest.fixture
def node(tmp_path: Path) -> Node:
    built = build_node(tmp_path)
    (tmp_path / "plugin").mkdir()
    return built


def _with_api(node: Node, api: FakeApiServer) -> tuple[ClaimPreparer, ClaimRef]:
    """A claim for HPRE_0 in the API (the preparer reads it there)."""
    stored = asyncio.run(
        api.create(RESOURCE_CLAIMS, claim_object("team-a", "c1", [Result("rsa", HPRE_0, POOL)]))
    )
    preparer = node.preparer()
    preparer.get_claim = lambda ns, name: api.get(RESOURCE_CLAIMS, name, ns)
    return preparer, ClaimRef("team-a", "c1", stored["metadata"]["uid"])


def _status(api: FakeApiServer) -> list[dict[str, Any]]:
    [claim] = [o for k, o in api.objects.items() if k[0] == RESOURCE_CLAIMS.plural]
    devices: list[dict[str, Any]] = claim.get("status", {}).get("devices", [])
    return devices


def _conditions(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in entry["conditions"]}


def _isolated(inventory: Inventory) -> Inventory:
    return Inventory(
        tuple(
            dataclasses.replace(d, health=Health.UNHEALTHY, reasons=("dev-node-missing",))
            if d.pci_address == "0000:79:00.0"
            else d
            for d in inventory
        )
    )


def test_a_prepared_claim_gets_its_devices_facts_and_conditions(node: Node) -> None:
    """One write after the prepare: driver, pool, device, data (engine, uacce name, NUMA
    node, PCI address), Ready and Healthy True; a second sync writes nothing."""
    api = FakeApiServer()
    preparer, ref = _with_api(node, api)
    writer = ClaimStatusWriter(api, DRIVER, lambda: node.inventory, lambda: preparer.state)

    async def main() -> None:
        await preparer.prepare([ref])
        assert await writer.sync() == 1
        assert await writer.sync() == 0

    asyncio.run(main())
    [entry] = _status(api)
    assert (entry["driver"], entry["pool"], entry["device"]) == (DRIVER, POOL, HPRE_0)
    assert entry["data"] == {
        "engine": "hpre", "uacceName": "hisi_hpre-2", "pciBusID": "0000:79:00.0", "numaNode": 0,
    }  # fmt: skip
    conditions = _conditions(entry)
    assert conditions["Ready"]["status"] == conditions["Healthy"]["status"] == "True"


def test_a_health_change_is_written_and_keeps_the_ready_time(node: Node) -> None:
    """The device loses its /dev node: Healthy False with reason DevNodeMissing; Ready keeps
    its lastTransitionTime; recovery writes Healthy True again."""
    api = FakeApiServer()
    preparer, ref = _with_api(node, api)
    inventory = {"now": node.inventory}
    writer = ClaimStatusWriter(api, DRIVER, lambda: inventory["now"], lambda: preparer.state)

    async def main() -> None:
        await preparer.prepare([ref])
        await writer.sync()
        ready = _conditions(_status(api)[0])["Ready"]
        ready["lastTransitionTime"] = "2020-01-01T00:00:00Z"  # long ago, as the API holds it
        writer.written[ref.uid][0]["conditions"][0]["lastTransitionTime"] = ready[
            "lastTransitionTime"
        ]
        inventory["now"] = _isolated(node.inventory)
        assert await writer.sync() == 1
        conditions = _conditions(_status(api)[0])
        assert conditions["Healthy"]["status"] == "False"
        assert conditions["Healthy"]["reason"] == "DevNodeMissing"
        assert conditions["Ready"]["lastTransitionTime"] == "2020-01-01T00:00:00Z"
        inventory["now"] = node.inventory
        assert await writer.sync() == 1
        assert _conditions(_status(api)[0])["Healthy"]["status"] == "True"

    asyncio.run(main())


def test_an_unprepare_takes_the_entries_back_once(node: Node) -> None:
    """Unprepared: one write with no entries of ours, then nothing more."""
    api = FakeApiServer()
    preparer, ref = _with_api(node, api)
    writer = ClaimStatusWriter(api, DRIVER, lambda: node.inventory, lambda: preparer.state)

    async def main() -> None:
        await preparer.prepare([ref])
        await writer.sync()
        await preparer.unprepare([ref])
        assert await writer.sync() == 1
        assert _status(api) == []
        assert await writer.sync() == 0

    asyncio.run(main())


def test_a_refusal_backs_off_and_a_gone_claim_is_forgotten(node: Node) -> None:
    """A 403 on the status write leaves the claim for after its backoff (no write at once
    again); the claim deleted meanwhile, its entries' removal meets 404 and it is forgotten."""
    api = FakeApiServer()
    preparer, ref = _with_api(node, api)
    backoff = Backoff(start=60.0, rng=random.Random(1))
    writer = ClaimStatusWriter(
        api, DRIVER, lambda: node.inventory, lambda: preparer.state, backoff=backoff
    )

    async def main() -> None:
        await preparer.prepare([ref])
        api.refuse["patch"] = ApiError("forbidden", status=403)
        assert await writer.sync() == 0
        assert await writer.sync() == 0
        assert api.calls["patch"] == 1  # the second sync waited for the backoff
        del api.refuse["patch"]
        backoff.succeeded(ref.uid)
        assert await writer.sync() == 1
        await api.delete(RESOURCE_CLAIMS, "c1", "team-a")
        await preparer.unprepare([ref])
        assert await writer.sync() == 0
        assert writer.written == {}

    asyncio.run(main())


def test_a_share_carries_its_id_and_queues() -> None:
    """A share of a shared device: shareID in the entry, its queues in the data."""
    from kae_deviceplugin.dra.checkpoint import PreparedClaim, PreparedDevice

    claim = PreparedClaim(
        "u", "ns", "n", (PreparedDevice("z", POOL, "zip-x", "share-1", 8),), "spec"
    )
    [entry] = device_statuses(DRIVER, claim, {}, "2026-01-01T00:00:00Z")
    assert entry["shareID"] == "share-1" and entry["data"] == {"queues": 8}
    assert _conditions(entry)["Healthy"]["reason"] == "NotOnNode"


def test_the_data_names_the_grant_whole_or_shared_and_the_total(node: Node) -> None:
    """With the functions' totals known: an exclusive claim's device is granted the whole
    function (queues = queuesTotal = 256), a share its own queues out of the total; a device
    gone from the node keeps the share and no total."""
    from kae_deviceplugin.dra.checkpoint import PreparedClaim, PreparedDevice

    api = FakeApiServer()
    preparer, ref = _with_api(node, api)
    totals = {d.pci_address: 256 for d in node.inventory}
    writer = ClaimStatusWriter(
        api, DRIVER, lambda: node.inventory, lambda: preparer.state, totals=lambda: totals
    )

    async def main() -> None:
        await preparer.prepare([ref])
        assert await writer.sync() == 1

    asyncio.run(main())
    [entry] = _status(api)
    assert (entry["data"]["queues"], entry["data"]["queuesTotal"]) == (256, 256)
    by_name = {"hpre-x": node.inventory.devices[0]}
    share = PreparedClaim("u", "ns", "n", (PreparedDevice("z", POOL, "hpre-x", "s-1", 8),), "s")
    now = "2026-01-01T00:00:00Z"
    [shared] = device_statuses(DRIVER, share, by_name, now, totals=totals)
    assert (shared["data"]["queues"], shared["data"]["queuesTotal"]) == (8, 256)
    [gone] = device_statuses(DRIVER, share, {}, now, totals=totals)
    assert gone["data"] == {"queues": 8}


def test_a_claim_gone_while_prepared_is_not_written_again(node: Node) -> None:
    """Deleted from the API while still prepared (its pod force-deleted, the kubelet's
    unprepare to come): one write meets 404 and none follows, however often the writer looks
    with no backoff left to wait, so no request of the claims' lane is spent on it; its
    unprepare then writes nothing. The old writer retried it on every pass."""
    api = FakeApiServer()
    preparer, ref = _with_api(node, api)
    backoff = Backoff(start=0.0, cap=0.0, rng=random.Random(1))  # any retry would come at once
    writer = ClaimStatusWriter(
        api, DRIVER, lambda: node.inventory, lambda: preparer.state, backoff=backoff
    )

    async def main() -> None:
        await preparer.prepare([ref])
        await api.delete(RESOURCE_CLAIMS, "c1", "team-a")
        assert await writer.sync() == 0
        assert api.calls["patch"] == 1
        for _ in range(3):
            assert await writer.sync() == 0
        assert api.calls["patch"] == 1
        await preparer.unprepare([ref])
        assert await writer.sync() == 0
        assert api.calls["patch"] == 1
        assert writer.written == {}

    asyncio.run(main())
