"""The project's API client against a server that misbehaves in the ways a proxy, a load
balancer or a hostile server can, over real sockets: a watch ended at once (backed off, every
request paced and counted), list pages (each paced), bodies too large or too amplifying (one
line, bounded), close-delimited and bodiless answers, HTTP/1.0 (never kept alive), a watch line
that never ends (bounded), bookmarks (asked, used), jittered watch timeouts, and JSON nested
too deep for the parser (one line, no traceback)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kae_deviceplugin.apiserver import rest_watch
from kae_deviceplugin.apiserver.http1 import MAX_BODY, MAX_LINE
from kae_deviceplugin.apiserver.paced import PacedApi
from kae_deviceplugin.apiserver.rest_api import RestApi, connect
from kae_deviceplugin.apiserver.seam import NODES, RESOURCE_SLICES
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

DEADLINE = 30.0
SELECTOR = {"spec.driver": "kae.openfuyao.com", "spec.nodeName": "n1"}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
T = TypeVar("T")


def run(tmp_path: Path, respond: Respond, body: Callable[[RestApi, RawServer], Awaitable[T]]) -> T:
    async def main() -> T:
        async with serving(respond) as server:
            client = connect(write_kubeconfig(tmp_path / "kubeconfig", server.url, "t0"))
            try:
                async with asyncio.timeout(DEADLINE):
                    return await body(client, server)
            finally:
                await client.close()

    return asyncio.run(main())


def raw_answer(payload: bytes, length: int | None = None) -> bytes:
    """A 200 of ``payload`` (JSON), its Content-Length ``length`` (default: its own)."""
    size = len(payload) if length is None else length
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
    return head.encode() + payload


def test_a_watch_ended_at_once_is_asked_again_after_a_growing_capped_wait_each_paced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that ends every watch at once with nothing in it: the client waits before each
    new request, longer each time up to the cap (jittered), and each request after the first
    takes a token of the PacedApi wrapping it, so ``requests["watch"]`` (the metric
    kae_apiserver_requests_total{verb="watch"}) equals the requests the server saw."""
    waits: list[float] = []

    async def recorded(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    monkeypatch.setattr(rest_watch, "pause", recorded)

    async def respond(request: Request, writer: Any) -> bool:
        writer.write(WATCH_HEAD + b"0\r\n\r\n")
        return True

    async def body(client: RestApi, server: RawServer) -> None:
        paced = PacedApi(client)
        watching = asyncio.create_task(_drain(paced.watch(RESOURCE_SLICES, SELECTOR, "1")))
        await server.requested(12)
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        assert paced.requests["watch"] == len(server.requests)
        assert len(waits) >= 10 and all(0.75 <= w <= 30.0 for w in waits)
        assert waits[5] > waits[0] * 4  # it grows: 1, 2, 4, 8, 16 s nominal
        assert max(waits) > 20.0  # and reaches the cap

    run(tmp_path, respond, body)


async def _drain(events: Any) -> None:
    async for _ in events:
        pass


def test_each_page_of_a_list_is_a_paced_request(tmp_path: Path) -> None:
    """A list the server pages (continue): three requests, three tokens, one result."""

    async def respond(request: Request, writer: Any) -> bool:
        page = int(request.query.get("continue", "0"))
        more = {"continue": str(page + 1)} if page < 2 else {"resourceVersion": "9"}
        items = [{"metadata": {"name": f"s{page}"}}]
        writer.write(json_answer(200, {"items": items, "metadata": more}))
        return True

    async def body(client: RestApi, server: RawServer) -> None:
        paced = PacedApi(client)
        items, version = await paced.list_versioned(RESOURCE_SLICES, SELECTOR)
        assert [i["metadata"]["name"] for i in items] == ["s0", "s1", "s2"] and version == "9"
        assert paced.requests["list"] == len(server.requests) == 3

    run(tmp_path, respond, body)


def test_an_endless_chunked_body_stops_at_the_limit_in_one_line(tmp_path: Path) -> None:
    """Chunks without end: the client stops reading at MAX_BODY and says so in one line."""

    async def respond(request: Request, writer: Any) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
        piece = chunked(b" " * 65536)
        while True:
            writer.write(piece)
            await writer.drain()

    async def body(client: RestApi, server: RawServer) -> None:
        err = await refused(client.get(NODES, "n1"))
        assert f"a body larger than {MAX_BODY} bytes" in str(err)
        assert "\n" not in str(err)

    run(tmp_path, respond, body)


def test_a_body_that_would_amplify_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """A list of empty objects under the byte limit (each 3 bytes, ~30x in Python objects) and
    a length over the limit: both one-line refusals."""
    flood = b"[" + b"{}," * (MAX_BODY // 4) + b"{}]"

    async def respond(request: Request, writer: Any) -> bool:
        payload = flood if request.path.endswith("/n1") else b"{}"
        length = len(payload) if request.path.endswith("/n1") else MAX_BODY + 1
        writer.write(raw_answer(payload, length))
        return False

    async def body(client: RestApi, server: RawServer) -> None:
        amplified = await refused(client.get(NODES, "n1"))
        assert "objects or arrays in" in str(amplified) and "undecodable answer" in str(amplified)
        too_long = await refused(client.get(NODES, "n2"))
        assert f"a body larger than {MAX_BODY} bytes (Content-Length" in str(too_long)

    run(tmp_path, respond, body)


def test_json_nested_too_deep_is_one_line_in_an_answer_and_in_a_watch(tmp_path: Path) -> None:
    """Nesting past the parser's recursion limit (padded so that it is within the object
    share): an ApiError of one line, no RecursionError, in a GET and in a watch event."""
    deep = b"[" * 20000 + b"]" * 20000
    padded = b'{"pad":"' + b"x" * 600_000 + b'","deep":' + deep + b"}"

    async def respond(request: Request, writer: Any) -> bool:
        if request.query.get("watch"):
            line = b'{"type":"ADDED","object":' + padded + b"}\n"
            writer.write(WATCH_HEAD + chunked(line) + b"0\r\n\r\n")
        else:
            writer.write(raw_answer(padded))
        return True

    async def body(client: RestApi, server: RawServer) -> None:
        for call in (client.get(NODES, "n1"), _drain(client.watch(RESOURCE_SLICES, SELECTOR))):
            err = await refused(call)
            assert "nested deeper than the parser follows" in str(err)
            assert "\n" not in str(err) and err.__cause__ is not None
            assert not isinstance(err.__cause__, RecursionError)

    run(tmp_path, respond, body)


def test_a_close_delimited_body_is_read_to_its_end(tmp_path: Path) -> None:
    """An HTTP/1.0 answer without a length, 200 KB written in pieces, then the close: the
    whole object is read (not the first piece)."""
    node = {**NODE, "metadata": {"name": "n1", "annotations": {"big": "x" * 200_000}}}
    payload = json.dumps(node).encode()

    async def respond(request: Request, writer: Any) -> bool:
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
        for start in range(0, len(payload), 4096):
            writer.write(payload[start : start + 4096])
            await writer.drain()
            await asyncio.sleep(0)
        return False

    async def body(client: RestApi, server: RawServer) -> None:
        got = await client.get(NODES, "n1")
        assert got["metadata"]["annotations"]["big"] == "x" * 200_000

    run(tmp_path, respond, body)


def test_a_204_without_a_length_is_empty_at_once(tmp_path: Path) -> None:
    """A 204 with neither length nor close: no body to wait for; the next call reuses the
    kept-alive connection."""

    async def respond(request: Request, writer: Any) -> bool:
        if request.method == "DELETE":
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        else:
            writer.write(json_answer(200, NODE))
        return True

    async def body(client: RestApi, server: RawServer) -> None:
        await client.delete(NODES, "n1")
        await client.get(NODES, "n1")
        assert [number for number, _ in server.requests] == [1, 1]

    run(tmp_path, respond, body)


def test_an_http_1_0_answer_is_never_kept_alive(tmp_path: Path) -> None:
    """An HTTP/1.0 answer with a length and no Connection header: the next request goes on a
    new connection."""

    async def respond(request: Request, writer: Any) -> bool:
        writer.write(json_answer(200, NODE).replace(b"HTTP/1.1", b"HTTP/1.0", 1))
        return True

    async def body(client: RestApi, server: RawServer) -> None:
        await client.get(NODES, "n1")
        await client.get(NODES, "n1")
        assert [number for number, _ in server.requests] == [1, 2]

    run(tmp_path, respond, body)


def test_a_watch_line_that_never_ends_is_bounded(tmp_path: Path) -> None:
    """Chunks of a line with no newline past MAX_LINE: the watch ends with one line saying so
    (not after the silence bound, not after the body limit)."""

    async def respond(request: Request, writer: Any) -> bool:
        writer.write(WATCH_HEAD)
        piece = chunked(b'{"type":"ADDED"' + b" " * 65536)
        for _ in range(MAX_LINE // 65536 + 2):
            writer.write(piece)
            await writer.drain()
        await asyncio.Event().wait()  # then silence, the connection open
        return False

    async def body(client: RestApi, server: RawServer) -> None:
        err = await refused(_drain(client.watch(RESOURCE_SLICES, SELECTOR)))
        assert f"a watch line longer than {MAX_LINE} bytes" in str(err)

    run(tmp_path, respond, body)


def test_bookmarks_are_asked_and_move_the_version_and_timeouts_are_jittered(
    tmp_path: Path,
) -> None:
    """Every watch request asks for bookmarks; a BOOKMARK is not passed on but the next
    request resumes from its version; timeoutSeconds is drawn between 300 and 600 anew."""
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "40"}}}

    async def respond(request: Request, writer: Any) -> bool:
        version = int(request.query["resourceVersion"])
        lines = [event("ADDED", f"s{version}", str(version + 1))]
        if version == 1:
            lines.append(json.dumps(bookmark).encode() + b"\n")
        writer.write(WATCH_HEAD + chunked(*lines) + b"0\r\n\r\n")
        return True

    async def body(client: RestApi, server: RawServer) -> list[str]:
        client.rng = random.Random(7)
        seen: list[str] = []
        async for kind, obj in client.watch(RESOURCE_SLICES, SELECTOR, "1"):
            seen.append(f"{kind} {obj['metadata']['name']}")
            if len(seen) == 2:
                break
        queries = [request.query for _, request in server.requests]
        assert [q["resourceVersion"] for q in queries] == ["1", "40"]
        assert all(q["allowWatchBookmarks"] == "true" for q in queries)
        seconds = [int(q["timeoutSeconds"]) for q in queries]
        assert all(300 <= s <= 600 for s in seconds) and len(set(seconds)) == 2
        return seen

    assert run(tmp_path, respond, body) == ["ADDED s1", "ADDED s40"]
