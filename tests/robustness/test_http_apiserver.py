"""The HTTP test API server itself, through the project's own client (in-process):
it answers as the real server does, and each fault it is told to make reaches the client as
the real one would."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kae_deviceplugin.apiserver.kubeconfig import load_kubeconfig
from kae_deviceplugin.apiserver.rest_api import RestApi, connect
from kae_deviceplugin.apiserver.seam import NODES, RESOURCE_CLAIMS, RESOURCE_SLICES
from kae_deviceplugin.errors import ApiError
from tests.support.api_calls import refused
from tests.support.dra_claims import Result, claim_object
from tests.support.http_apiserver import HttpApiServer, write_kubeconfig

DEADLINE = 10.0
SELECTOR = {"spec.driver": "kae.openfuyao.com", "spec.nodeName": "n1"}
T = TypeVar("T")


def a_slice(name: str, node: str = "n1", taint: bool = False) -> dict[str, Any]:
    device: dict[str, Any] = {"name": "dev-0"}
    if taint:
        device["taints"] = [{"key": "kae.openfuyao.com/unhealthy", "effect": "NoSchedule"}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "kae.openfuyao.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [device],
        },
    }


@pytest.fixture
def api() -> Iterator[HttpApiServer]:
    with HttpApiServer() as server:
        yield server


def with_client(api: HttpApiServer, tmp_path: Path, body: Callable[[RestApi], Awaitable[T]]) -> T:
    """Run ``body`` with a client of ``api`` made from a kubeconfig, as the daemon makes it."""

    async def run() -> T:
        client = connect(api.kubeconfig(tmp_path / "kubeconfig"))
        try:
            async with asyncio.timeout(DEADLINE):
                return await body(client)
        finally:
            await client.close()

    return asyncio.run(run())


def test_reads_and_writes_answer_as_the_real_server(api: HttpApiServer, tmp_path: Path) -> None:
    """GET of a seeded Node and claim; a created slice gets uid, resourceVersion, creation
    time and its taint's timeAdded; 409 on a second create and on a stale replace, 404 on a
    delete of nothing; a list filters on the field selector and has a resourceVersion."""
    node_uid = api.seed_node("n1")
    claim = api.seed("resourceclaims", claim_object("team-a", "c1", [Result("r", "d", "n1")]))

    async def body(client: RestApi) -> None:
        assert (await client.get(NODES, "n1"))["metadata"]["uid"] == node_uid
        read = await client.get(RESOURCE_CLAIMS, "c1", "team-a")
        assert read["metadata"]["uid"] == claim["metadata"]["uid"]
        made = await client.create(RESOURCE_SLICES, a_slice("s1", taint=True))
        assert {"uid", "resourceVersion", "creationTimestamp"} <= set(made["metadata"])
        assert "timeAdded" in made["spec"]["devices"][0]["taints"][0]
        assert (await refused(client.create(RESOURCE_SLICES, a_slice("s1")))).status == 409
        await client.create(RESOURCE_SLICES, a_slice("s2", node="n2"))
        listed = await client.list(RESOURCE_SLICES, SELECTOR)
        assert [s["metadata"]["name"] for s in listed] == ["s1"]
        replaced = (await client.replace(RESOURCE_SLICES, made))["metadata"]["resourceVersion"]
        assert int(replaced) > int(made["metadata"]["resourceVersion"])
        stale = await refused(client.replace(RESOURCE_SLICES, made))
        assert (stale.status, stale.reason) == (409, "Conflict")
        await client.delete(RESOURCE_SLICES, "s1")
        assert (await refused(client.delete(RESOURCE_SLICES, "s1"))).status == 404
        bad = await refused(client.list(RESOURCE_SLICES, {"spec.devices": "x"}))
        assert bad.status == 400

    with_client(api, tmp_path, body)
    assert {s["metadata"]["name"] for s in api.slices()} == {"s2"}


def test_refusals_are_statuses_counted_per_verb(api: HttpApiServer, tmp_path: Path) -> None:
    """A refusal for two requests answers exactly two (422, its reason Invalid), then the verb
    works again; a persistent 500 stays until allowed; every request is counted with its
    answer's code."""
    api.faults.refuse("create", code=422, times=2)
    api.faults.refuse("list", code=500)

    async def body(client: RestApi) -> None:
        for _ in range(2):
            error = await refused(client.create(RESOURCE_SLICES, a_slice("s1")))
            assert (error.status, error.reason) == (422, "Invalid")
        await client.create(RESOURCE_SLICES, a_slice("s1"))
        for _ in range(3):
            assert (await refused(client.list(RESOURCE_SLICES, SELECTOR))).status == 500
        api.faults.allow("list")
        assert len(await client.list(RESOURCE_SLICES, SELECTOR)) == 1

    with_client(api, tmp_path, body)
    assert [r.code for r in api.faults.requests("create")] == [422, 422, 201]
    assert api.faults.count("list") == 4
    assert api.faults.count(None, None) == 7


def raw_get(api: HttpApiServer, path: str, token: str) -> tuple[int, dict[str, Any], str | None]:
    """Status, JSON body and Retry-After of a plain GET with ``token``."""
    request = urllib.request.Request(api.url + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=DEADLINE) as answer:
            return answer.status, json.loads(answer.read()), answer.headers["Retry-After"]
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), err.headers["Retry-After"]


def test_429_says_when_to_retry_and_a_wrong_token_is_401(api: HttpApiServer) -> None:
    """A 429 carries Retry-After and the Status's retryAfterSeconds; a wrong token is 401."""
    api.seed_node("n1")
    api.faults.refuse("get", "nodes", code=429, retry_after=3)
    code, status, retry = raw_get(api, "/api/v1/nodes/n1", api.token)
    assert (code, retry, status["kind"], status["code"]) == (429, "3", "Status", 429)
    assert status["details"]["retryAfterSeconds"] == 3
    code, status, _ = raw_get(api, "/api/v1/nodes/n1", "wrong")
    assert (code, status["reason"]) == (401, "Unauthorized")


async def events(client: RestApi, into: list[str]) -> None:
    async for event, obj in client.watch(RESOURCE_SLICES, SELECTOR):
        into.append(f"{event} {obj['metadata']['name']}")


async def until(check: Callable[[], bool]) -> None:
    """Until ``check()`` holds (the caller's timeout bounds it)."""
    while not check():
        await asyncio.sleep(0.01)


def test_watch_ends_clean_with_410_and_with_garbage(api: HttpApiServer, tmp_path: Path) -> None:
    """A watch starts with ADDED for what exists; after a clean end the client resumes from the
    last version and misses nothing (the DELETED of the gap arrives); a 410 ERROR event is an
    ApiError 410; a garbage line is an error that is no ApiError."""
    api.seed("resourceslices", a_slice("s1"))

    async def body(client: RestApi) -> None:
        seen: list[str] = []
        watch = asyncio.create_task(events(client, seen))
        await until(lambda: seen == ["ADDED s1"])
        assert api.store.end_watches("clean", wipe="resourceslices") == 1
        await until(lambda: seen == ["ADDED s1", "DELETED s1"])
        assert api.store.end_watches("gone") == 1
        with pytest.raises(ApiError) as gone:
            await watch
        assert gone.value.status == 410
        watch = asyncio.create_task(events(client, seen))
        await until(lambda: api.store.watchers != [])
        api.store.end_watches("garbage")
        with pytest.raises(ApiError, match="undecodable event") as garbage:
            await watch
        assert garbage.value.status == 0  # no answer of the server's: the stream broke

    with_client(api, tmp_path, body)
    assert api.faults.count("watch") == 3


def test_away_refuses_and_resets_then_back_on_the_same_port(
    api: HttpApiServer, tmp_path: Path
) -> None:
    """away() resets an open watch and refuses new connections; back() serves on the port."""
    api.seed_node("n1")
    port = api.port

    async def body(client: RestApi) -> None:
        watch = asyncio.create_task(events(client, []))
        await until(lambda: api.store.watchers != [])
        await asyncio.to_thread(api.away)
        with pytest.raises(ApiError, match="not reachable"):
            await watch
        assert "not reachable" in str(await refused(client.get(NODES, "n1")))
        await asyncio.to_thread(api.back)
        assert (await client.get(NODES, "n1"))["metadata"]["name"] == "n1"

    with_client(api, tmp_path, body)
    assert api.port == port


def test_freeze_holds_answers_until_thaw(api: HttpApiServer, tmp_path: Path) -> None:
    """Frozen, a request arrives (it is counted) but is not answered; thaw answers it."""
    api.seed_node("n1")
    api.freeze(6 * DEADLINE)  # longer than the client's deadline: only thaw() answers in time

    async def body(client: RestApi) -> dict[str, Any]:
        asked = asyncio.create_task(client.get(NODES, "n1"))
        await until(lambda: api.faults.count("get", "nodes") == 1)
        assert api.faults.requests("get", "nodes")[0].code is None  # not answered
        api.thaw()
        return await asked

    assert with_client(api, tmp_path, body)["metadata"]["name"] == "n1"


def test_dropped_fields_are_not_kept(api: HttpApiServer, tmp_path: Path) -> None:
    """A server told to drop spec.devices.taints stores and returns the slice without them."""
    api.faults.drop_fields("spec.devices.taints")

    async def body(client: RestApi) -> dict[str, Any]:
        return await client.create(RESOURCE_SLICES, a_slice("s1", taint=True))

    assert with_client(api, tmp_path, body)["spec"]["devices"] == [{"name": "dev-0"}]
    assert api.slices()[0]["spec"]["devices"] == [{"name": "dev-0"}]


def test_the_kubeconfig_is_one_the_client_reads(tmp_path: Path) -> None:
    """The kubeconfig names the plain-http server and the token user."""
    path = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1", "t0")
    config, server = load_kubeconfig(path)
    assert server == "http://127.0.0.1:1"
    assert config["users"][0]["user"]["token"] == "t0"
