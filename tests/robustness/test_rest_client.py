"""The driver's own API client (``rest_api``) over a real socket against a server that answers
with the test's bytes: chunked watch lines split anywhere, a clean end resumed from the last
version, a 410 (as an event and as an answer), a cut in the middle of a chunk, a server that
never answers or a watch that goes silent (each bounded), kept-alive connections the server
closes, the requests' methods, paths and headers as the API server expects them, and a token
file read again after a 401."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kae_deviceplugin.apiserver import rest_watch, rest_wire
from kae_deviceplugin.apiserver.rest_api import RestApi, connect
from kae_deviceplugin.apiserver.seam import NODES, RESOURCE_CLAIMS, RESOURCE_SLICES
from kae_deviceplugin.errors import UNREACHABLE
from tests.support.api_calls import refused
from tests.support.apiserver_wire import Request
from tests.support.http_apiserver import write_kubeconfig
from tests.support.raw_http import (
    WATCH_HEAD,
    RawServer,
    Respond,
    chunked,
    event,
    json_answer,
    serving,
)

DEADLINE = 10.0
SELECTOR = {"spec.driver": "kae.openfuyao.com", "spec.nodeName": "n1"}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
GONE = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
T = TypeVar("T")


def run(tmp_path: Path, respond: Respond, body: Callable[[RestApi, RawServer], Awaitable[T]]) -> T:
    """``body`` with a client made from a kubeconfig naming a server that answers with
    ``respond``, all within the deadline."""

    async def main() -> T:
        async with serving(respond) as server:
            client = connect(write_kubeconfig(tmp_path / "kubeconfig", server.url, "t0"))
            try:
                async with asyncio.timeout(DEADLINE):
                    return await body(client, server)
            finally:
                await client.close()

    return asyncio.run(main())


async def watched(client: RestApi, into: list[str], start: str | None = None) -> None:
    async for kind, obj in client.watch(RESOURCE_SLICES, SELECTOR, start):
        into.append(f"{kind} {obj['metadata']['name']}")


def test_watch_lines_split_across_chunks_a_clean_end_resumes_and_a_410_ends_it(
    tmp_path: Path,
) -> None:
    """Events cut at any byte across chunks (one with an extension, the last with a trailer)
    are read whole; after the clean end the watch asks again from the last event's version,
    and the 410 ERROR event of that second stream is an ApiError 410 naming the server."""
    first = event("ADDED", "s1", "5") + event("MODIFIED", "s1", "7")

    async def respond(request: Request, writer: Any) -> bool:
        if request.query.get("resourceVersion") == "3":
            parts = [first[:3], first[3:40], first[40:-1], first[-1:]]
            writer.write(WATCH_HEAD + chunked(*parts).replace(b"\r\n", b";x=1\r\n", 1))
            writer.write(b"0\r\nX-Trailer: 1\r\n\r\n")
        else:
            writer.write(WATCH_HEAD + chunked(json.dumps({"type": "ERROR", "object": GONE})
                                              .encode() + b"\n") + b"0\r\n\r\n")  # fmt: skip
        return True

    async def body(client: RestApi, server: RawServer) -> list[str]:
        seen: list[str] = []
        gone = await refused(watched(client, seen, start="3"))
        assert (gone.status, gone.reason, gone.verb) == (410, "Expired", "watch")
        assert str(gone).startswith(f"watch resourceslices at {server.url}: too old")
        queries = [request.query for _, request in server.requests]
        assert [q.get("resourceVersion") for q in queries] == ["3", "7"]
        assert queries[0]["fieldSelector"] == "spec.driver=kae.openfuyao.com,spec.nodeName=n1"
        assert queries[0]["watch"] == "true" and 300 <= int(queries[0]["timeoutSeconds"]) <= 600
        assert queries[0]["allowWatchBookmarks"] == "true"
        return seen

    assert run(tmp_path, respond, body) == ["ADDED s1", "MODIFIED s1"]


def test_a_410_answer_to_the_watch_request_is_an_api_error(tmp_path: Path) -> None:
    """The server refuses the watch itself with 410 and a Status: ApiError 410, no retry."""

    async def respond(request: Request, writer: Any) -> bool:
        writer.write(json_answer(410, GONE, "Gone"))
        return True

    async def body(client: RestApi, server: RawServer) -> None:
        gone = await refused(watched(client, [], start="1"))
        assert gone.status == 410 and "(HTTP 410 Expired)" in str(gone)
        assert len(server.requests) == 1

    run(tmp_path, respond, body)


def test_a_server_closing_in_the_middle_of_a_chunk_breaks_the_watch(tmp_path: Path) -> None:
    """One event, then half of a chunk and the connection closed: the event was delivered and
    the watch ends with an unreachable ApiError, not a clean end (that would be resumed)."""

    async def respond(request: Request, writer: Any) -> bool:
        writer.write(WATCH_HEAD + chunked(event("ADDED", "s1", "2")) + b'40\r\n{"type"')
        await writer.drain()
        return False  # the server closes

    async def body(client: RestApi, server: RawServer) -> list[str]:
        seen: list[str] = []
        broken = await refused(watched(client, seen))
        assert (broken.status, broken.reason) == (0, UNREACHABLE)
        assert "not reachable (the connection closed in the middle of an answer)" in str(broken)
        assert len(server.requests) == 1
        return seen

    assert run(tmp_path, respond, body) == ["ADDED s1"]


def test_a_bad_chunk_size_is_a_broken_stream(tmp_path: Path) -> None:
    """A chunk size that is no hex number (a proxy's page in the stream): unreachable."""

    async def respond(request: Request, writer: Any) -> bool:
        writer.write(WATCH_HEAD + b"zz\r\n<html>\r\n")
        return True

    async def body(client: RestApi, server: RawServer) -> None:
        broken = await refused(watched(client, []))
        assert broken.reason == UNREACHABLE and "no chunk size" in str(broken)

    run(tmp_path, respond, body)


def test_a_server_that_never_answers_is_a_timeout_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request read and never answered, and a watch whose head came but nothing after: each
    ends in its own bound with an unreachable ApiError saying how long it waited."""
    monkeypatch.setattr(rest_wire, "REQUEST_TIMEOUT", 0.2)
    monkeypatch.setattr(rest_watch, "WATCH_SILENCE", 0.2)
    never = asyncio.Event()

    async def respond(request: Request, writer: Any) -> bool:
        if request.query.get("watch"):
            writer.write(WATCH_HEAD)
        await never.wait()
        return False

    async def body(client: RestApi, server: RawServer) -> None:
        slow = await refused(client.get(NODES, "n1"))
        assert slow.reason == UNREACHABLE and "no answer within 0.2 s" in str(slow)
        silent = await refused(watched(client, []))
        assert silent.reason == UNREACHABLE and "no event nor end of the watch in 0.2 s" in str(
            silent
        )

    run(tmp_path, respond, body)


def test_connections_are_kept_alive_and_one_the_server_closed_is_replaced(
    tmp_path: Path,
) -> None:
    """Two reads share a connection; the server then closes it after an answer without saying
    so, and the next read goes on a new connection and is answered."""
    answers = 0

    async def respond(request: Request, writer: Any) -> bool:
        nonlocal answers
        answers += 1
        writer.write(json_answer(200, NODE))
        await writer.drain()
        return answers != 2  # the second answer's connection is closed after it

    async def body(client: RestApi, server: RawServer) -> list[int]:
        for _ in range(3):
            assert (await client.get(NODES, "n1"))["metadata"]["name"] == "n1"
        return [number for number, _ in server.requests]

    assert run(tmp_path, respond, body) == [1, 1, 2]


def test_requests_are_those_the_api_server_expects(tmp_path: Path) -> None:
    """Paths, methods, queries and headers: a create and a replace with fieldManager as JSON
    (apiVersion and kind filled), a status apply as apply-patch+yaml with force, a delete, a
    namespaced get; each with the bearer token; a 404 Status is its ApiError."""

    async def respond(request: Request, writer: Any) -> bool:
        if request.method == "DELETE":
            writer.write(json_answer(404, {"kind": "Status", "code": 404, "reason": "NotFound"}))
        else:
            writer.write(json_answer(200, json.loads(request.body or b"{}") or NODE))
        return True

    async def body(client: RestApi, server: RawServer) -> list[tuple[str, str, str, str]]:
        made = await client.create(RESOURCE_SLICES, {"metadata": {"name": "s1"}})
        assert made["kind"] == "ResourceSlice" and made["apiVersion"] == "resource.k8s.io/v1"
        await client.replace(RESOURCE_SLICES, {"metadata": {"name": "s1"}})
        claim = {"metadata": {"name": "c1", "namespace": "team-a"}, "status": {}}
        await client.apply_status(RESOURCE_CLAIMS, claim)
        await client.get(RESOURCE_CLAIMS, "c1", "team-a")
        missing = await refused(client.delete(RESOURCE_SLICES, "s1"))
        assert (missing.status, missing.verb) == (404, "delete")
        assert {r.headers["authorization"] for _, r in server.requests} == {"Bearer t0"}
        return [
            (r.method, r.path, "&".join(f"{k}={v}" for k, v in r.query.items()),
             r.headers.get("content-type", ""))
            for _, r in server.requests
        ]  # fmt: skip

    slices = "/apis/resource.k8s.io/v1/resourceslices"
    claim = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/c1"
    manager = "fieldManager=kae-deviceplugin"
    assert run(tmp_path, respond, body) == [
        ("POST", slices, manager, "application/json"),
        ("PUT", f"{slices}/s1", manager, "application/json"),
        ("PATCH", f"{claim}/status", f"{manager}&force=true", "application/apply-patch+yaml"),
        ("GET", claim, "", ""),
        ("DELETE", f"{slices}/s1", "", ""),
    ]


def token_kubeconfig(tmp_path: Path, server: str) -> Path:
    """A kubeconfig whose user has a tokenFile, ``token`` beside it."""
    config = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"tokenFile": "token"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    return path


def rotating(token: Path, answer: Callable[[Request, Any], None]) -> Respond:
    """A server that accepts only the token "new": it rotates the file from "old" to "new" and
    answers 401 to the old one; ``answer`` answers an accepted request."""

    async def respond(request: Request, writer: Any) -> bool:
        if request.headers.get("authorization") != "Bearer new":
            token.write_text("new\n")  # rotated just after the client read it
            writer.write(json_answer(401, {"kind": "Status", "code": 401}, "Unauthorized"))
        else:
            answer(request, writer)
        return True

    return respond


def test_a_token_file_is_read_again_after_a_401(tmp_path: Path) -> None:
    """A kubeconfig user with a tokenFile: read at the first call; rotated meanwhile, the
    server's 401 makes the client read it again and ask once more; then it is kept. A watch
    does the same."""
    token = tmp_path / "token"
    token.write_text("old\n")

    def answer(request: Request, writer: Any) -> None:
        if request.query.get("watch"):
            gone = json.dumps({"type": "ERROR", "object": GONE}).encode() + b"\n"
            writer.write(WATCH_HEAD + chunked(gone) + b"0\r\n\r\n")
        else:
            writer.write(json_answer(200, NODE))

    async def main() -> list[str]:
        async with serving(rotating(token, answer)) as server:
            path = token_kubeconfig(tmp_path, server.url)
            for _ in range(2):  # a client that reads, then one that watches
                client = connect(path)
                try:
                    async with asyncio.timeout(DEADLINE):
                        if not server.requests:
                            await client.get(NODES, "n1")
                            await client.get(NODES, "n1")
                        else:
                            assert (await refused(watched(client, []))).status == 410
                finally:
                    await client.close()
                token.write_text("old\n")
            return [r.headers["authorization"] for _, r in server.requests]

    reads, watch = ["Bearer old", "Bearer new", "Bearer new"], ["Bearer old", "Bearer new"]
    assert asyncio.run(main()) == reads + watch


def test_a_watch_the_caller_stops_reading_closes_its_connection(tmp_path: Path) -> None:
    """The caller takes one event and closes the watch: the server sees its connection end
    at once (not when the generator is collected), while the stream was still open."""

    async def respond(request: Request, writer: Any) -> bool:
        writer.write(WATCH_HEAD + chunked(event("ADDED", "s1", "2")))
        return True  # then waits for the next request: the client's close ends it

    async def body(client: RestApi, server: RawServer) -> None:
        events = client.watch(RESOURCE_SLICES, SELECTOR)
        assert (await anext(events))[0] == "ADDED"
        assert server.ended == 0
        await events.aclose()  # type: ignore[attr-defined]
        await server.closed(1)

    run(tmp_path, respond, body)
