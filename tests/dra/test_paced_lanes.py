"""The API pacing's seam (``apiserver.paced``): lanes that do not wait for each other, no debt
after a burst whose callers gave up, and a refusal with a cause instead of a queue minutes deep.

Issue 36: one burst of 1,000 claims whose reads timed out kept their tokens, so a device's
health reached its slice 166 s later and new claims were refused all that time with an empty
cause. The server here answers no claim read until the test lets it, as one under load would.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kae_deviceplugin.apiserver.paced import IN_FLIGHT, PacedApi
from kae_deviceplugin.apiserver.rest_api import connect
from kae_deviceplugin.apiserver.seam import NODES, RESOURCE_CLAIMS, JsonObject, Kind
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.core.backoff import TokenBucket
from kae_deviceplugin.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from kae_deviceplugin.dra.frontend import DraFrontEnd
from kae_deviceplugin.errors import RequestBudgetSpent
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.dra.inventories import tree_inventory
from tests.dra.node import HPRE_0, POOL
from tests.support.apiserver_wire import Request
from tests.support.dra_claims import Result, claim_object
from tests.support.fake_apiserver import FakeApiServer
from tests.support.http_apiserver import write_kubeconfig
from tests.support.raw_http import json_answer, serving

DEADLINE = 10.0


class SlowClaims(FakeApiServer):
    """Claim reads wait until ``answer`` is set; everything else is answered at once."""

    def __init__(self, expect: int = 0) -> None:
        super().__init__()
        self.answer = asyncio.Event()
        self.claim_reads = 0
        self.expect = expect
        self.reached = asyncio.Event()  # set once ``expect`` claim reads arrived

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        if kind == RESOURCE_CLAIMS:
            self.claim_reads += 1
            if self.claim_reads >= self.expect:
                self.reached.set()
            await self.answer.wait()
        return await super().get(kind, name, namespace)


def node() -> JsonObject:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1"}}


async def read_claims(claims: PacedApi, count: int, timeout: float) -> list[BaseException]:
    """``count`` claim reads at once, each given up after ``timeout``; what each raised."""

    async def one(index: int) -> BaseException:
        try:
            async with asyncio.timeout(timeout):
                await claims.get(RESOURCE_CLAIMS, f"c{index}", "team-a")
        except (TimeoutError, RequestBudgetSpent) as err:
            return err
        raise AssertionError("a claim read was answered while the server answers none")

    return list(await asyncio.gather(*(one(i) for i in range(count))))


def test_a_burst_of_claim_reads_never_delays_the_pools_requests() -> None:
    """300 claim reads queued in the claims' lane (IN_FLIGHT sent and held, the rest waiting
    for tokens or for one of those to end): a request of the pool's lane still goes at once,
    while every claim read is still held."""
    asyncio.run(_burst_then_pool())


async def _burst_then_pool() -> None:
    server = SlowClaims(expect=IN_FLIGHT)
    server.objects[("nodes", None, "worker-1")] = node()
    pool = PacedApi(server)
    claims = pool.lane("claims", TokenBucket(rate=5.0, burst=20.0))  # no limit: deepest queue
    burst = asyncio.ensure_future(read_claims(claims, 300, timeout=60.0))
    async with asyncio.timeout(DEADLINE):
        await server.reached.wait()
    async with asyncio.timeout(DEADLINE):  # 56 s behind the claims if they shared a bucket
        assert (await pool.get(NODES, "worker-1"))["metadata"]["name"] == "worker-1"
    assert server.claim_reads == IN_FLIGHT and not burst.done()
    burst.cancel()
    with pytest.raises(asyncio.CancelledError):
        await burst


def test_reads_that_gave_up_leave_no_debt_and_a_full_queue_refuses_with_a_cause() -> None:
    """With at most 2 s of reads queued (burst 20 at 5 a second): of 100 reads at once, 20
    go, 10 queue and 70 are refused at once, each with a cause that names the lane and says
    to ask again. Once the queued ones give up, the next read goes out at once."""
    asyncio.run(_refusals_then_a_read())


async def _refusals_then_a_read() -> None:
    server = SlowClaims()
    claims = PacedApi(server).lane("claims", TokenBucket(rate=5.0, burst=20.0, max_wait=2.0))
    errors = await read_claims(claims, 100, timeout=0.1)  # before any queued one goes
    refused = [e for e in errors if isinstance(e, RequestBudgetSpent)]
    assert len(refused) == 70
    assert all("claims" in str(e) and "ask again" in str(e) for e in refused)
    assert claims.refused["get"] == 70
    assert claims.requests["get"] == 20  # only what was sent is counted as sent
    assert claims.bucket.queued(asyncio.get_running_loop().time()) == 0.0
    server.answer.set()
    server.objects[("resourceclaims", "team-a", "c1")] = {"metadata": {"name": "c1"}}
    async with asyncio.timeout(DEADLINE):
        await claims.get(RESOURCE_CLAIMS, "c1", "team-a")


def test_the_claims_status_never_spends_a_claim_reads_token(tmp_path: Path) -> None:
    """The DRA front end writes claims' status in a lane of its own: with one token in each
    lane and no queueing, a status write leaves the claims' token for the next prepare's claim
    read. Through one lane (as before), that read would be refused: on the real cluster, 50
    pods at once meant 50 status writes between the reads, and each read waited 200 ms more."""
    TREES["kunpeng920-2p"].build(tmp_path / "tree")
    settings = Settings(
        sysfs_root=tmp_path / "tree" / "sys",
        kubelet_root=tmp_path / "kubelet",
        cdi_dir=tmp_path / "cdi",
    )
    server = FakeApiServer()
    paced = PacedApi(server)
    claims, status = (
        paced.lane(name, TokenBucket(rate=0.001, burst=1.0, max_wait=0.0))
        for name in ("claims", "claim status")
    )
    front = DraFrontEnd(settings, paced, "worker-1", ContainerFiles(), claims, status_api=status)
    front.inventory = tree_inventory(tmp_path / "tree")
    claim = claim_object("team-a", "c1", [Result("hpre", HPRE_0, POOL)])
    uid = asyncio.run(server.create(RESOURCE_CLAIMS, claim))["metadata"]["uid"]
    held = PreparedDevice("hpre", POOL, HPRE_0)
    front.preparer.state = Checkpoint({uid: PreparedClaim(uid, "team-a", "c1", (held,), "s")})

    async def main() -> None:
        assert await front.status.sync() == 1
        assert (await front._get_claim("team-a", "c1"))["metadata"]["uid"] == uid

    asyncio.run(main())


def test_a_burst_of_reads_shares_a_few_connections(tmp_path: Path) -> None:
    """50 claim reads at once through the real client: at most IN_FLIGHT connections, each
    kept alive for the next read, instead of a new connection (a TLS handshake on the event
    loop) for nearly every read."""

    async def respond(request: Request, writer: asyncio.StreamWriter) -> bool:
        name = request.path.rsplit("/", 1)[1]
        writer.write(json_answer(200, {"metadata": {"name": name}}))
        await writer.drain()
        return True

    async def main() -> int:
        async with serving(respond) as server:
            client = connect(write_kubeconfig(tmp_path / "kubeconfig", server.url, "t0"))
            claims = PacedApi(client).lane("claims", TokenBucket(rate=5.0, burst=50.0))
            try:
                async with asyncio.timeout(DEADLINE):
                    await asyncio.gather(
                        *(claims.get(RESOURCE_CLAIMS, f"c{i}", "team-a") for i in range(50))
                    )
            finally:
                await client.close()
            assert len(server.requests) == 50
            return server.connections

    assert asyncio.run(main()) <= IN_FLIGHT
