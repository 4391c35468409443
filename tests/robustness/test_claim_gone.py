"""What the stale-claim sweep takes as proof that a claim is gone, read off the wire: the real
API client against the test API server (over HTTP) and against a server whose 404 names
nothing (an API server that does not serve resource.k8s.io/v1, or a proxy)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kae_deviceplugin.apiserver.rest_api import RestApi, connect
from kae_deviceplugin.apiserver.seam import RESOURCE_CLAIMS
from kae_deviceplugin.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.dra.stale_claims import stale_claims
from tests.support.api_calls import refused
from tests.support.apiserver_wire import Request
from tests.support.dra_claims import Result, claim_object
from tests.support.http_apiserver import HttpApiServer, write_kubeconfig
from tests.support.raw_http import json_answer, serving

DEADLINE = 10.0
NO_API = {
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
    "reason": "NotFound", "message": "the server could not find the requested resource",
    "details": {},
}  # fmt: skip


def _recorded(*names: str) -> Checkpoint:
    device = PreparedDevice("hpre", "worker-1", "hpre-0000-79-00-0")
    state = Checkpoint()
    for name in names:
        uid = f"uid-{name}"
        state = state.with_claim(PreparedClaim(uid, "team-a", name, (device,), f"{uid}.json"))
    return state


async def _verdict(client: RestApi, state: Checkpoint) -> list[ClaimRef]:
    async def get(namespace: str, name: str) -> Any:
        return await client.get(RESOURCE_CLAIMS, name, namespace)

    try:
        async with asyncio.timeout(DEADLINE):
            return await stale_claims(state, get)
    finally:
        await client.close()


def test_the_api_servers_404_names_the_claim_and_proves_it_gone(tmp_path: Path) -> None:
    """A deleted claim's 404 carries a Status naming it (details name, group, kind), which the
    client keeps on its ApiError; the sweep's verdict takes that claim and not the live one."""
    with HttpApiServer() as api:
        api.seed("resourceclaims", claim_object("team-a", "alive", [Result("r", "d", "p")],
                                                 uid="uid-alive"))  # fmt: skip

        async def main() -> list[ClaimRef]:
            client = connect(api.kubeconfig(tmp_path / "kubeconfig"))
            err = await refused(client.get(RESOURCE_CLAIMS, "deleted", "team-a"))
            assert err.status == 404 and err.details == {
                "name": "deleted", "group": "resource.k8s.io", "kind": "resourceclaims",
            }  # fmt: skip
            return await _verdict(client, _recorded("alive", "deleted"))

        assert asyncio.run(main()) == [ClaimRef("team-a", "deleted", "uid-deleted")]


def test_a_404_that_names_nothing_proves_nothing(tmp_path: Path) -> None:
    """A server answering every GET with the 404 an API server gives for an API it does not
    serve (a Status with empty details), and one answering a plain-text 404: no claim is
    proven gone."""

    async def no_api(request: Request, writer: Any) -> bool:
        writer.write(json_answer(404, NO_API))
        return True

    async def plain(request: Request, writer: Any) -> bool:
        body = b"404 page not found\n"
        head = f"HTTP/1.1 404 Not Found\r\nContent-Length: {len(body)}\r\n\r\n"
        writer.write(head.encode() + body)
        return True

    async def main() -> list[list[ClaimRef]]:
        verdicts = []
        for respond in (no_api, plain):
            async with serving(respond) as server:
                client = connect(write_kubeconfig(tmp_path / "kubeconfig", server.url, "t0"))
                verdicts.append(await _verdict(client, _recorded("a", "b")))
        return verdicts

    assert asyncio.run(main()) == [[], []]
