"""A raw HTTP server for the API client's own tests: it answers each request with whatever bytes
the test's ``respond`` writes (a cut chunk, a silence, a 410), over a real socket on 127.0.0.1,
plain or TLS, in the test's own event loop. Requests are read as the test API server reads them
(``apiserver_wire.read_request``) and recorded with the number of the connection they came on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.apiserver_wire import Request, read_request

HOST = "127.0.0.1"
# What the test does with one request: write an answer (or not, or half of one); whether the
# connection goes on to read the next request.
Respond = Callable[[Request, asyncio.StreamWriter], Awaitable[bool]]


@dataclass
class RawServer:
    url: str
    requests: list[tuple[int, Request]] = field(default_factory=list)
    connections: int = 0
    ended: int = 0  # connections the client closed (or the server, after ``respond``)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # set at each request
    left: asyncio.Event = field(default_factory=asyncio.Event)  # set as each connection ends

    async def requested(self, count: int) -> None:
        """Until ``count`` requests arrived (the caller's deadline bounds the wait)."""
        while len(self.requests) < count:
            self.arrived.clear()
            await self.arrived.wait()

    async def closed(self, count: int) -> None:
        """Until ``count`` connections ended (the caller's deadline bounds the wait)."""
        while self.ended < count:
            self.left.clear()
            await self.left.wait()


@contextlib.asynccontextmanager
async def serving(respond: Respond, tls: ssl.SSLContext | None = None) -> AsyncIterator[RawServer]:
    """Serve with ``respond`` until the block ends; then every connection is cut."""
    tasks: set[asyncio.Task[Any]] = set()
    state: list[RawServer] = []

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        raw = state[0]
        raw.connections += 1
        number = raw.connections
        cut = True
        try:
            while (request := await read_request(reader)) is not None:
                raw.requests.append((number, request))
                raw.arrived.set()
                if not await respond(request, writer):
                    break
            cut = False
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            raw.ended += 1
            raw.left.set()
            await _end(writer, cut)
            tasks.discard(task)

    server = await asyncio.start_server(connection, HOST, 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    state.append(RawServer(f"{'https' if tls else 'http'}://{HOST}:{port}"))
    try:
        yield state[0]
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _end(writer: asyncio.StreamWriter, cut: bool) -> None:
    """Close the connection; one cut short (the peer gone, the block over) drops what is still
    queued and is closed before this returns. A plain close would wait to send a queue that
    will never leave (an endless body to a client that hung up), and the loop could end first,
    leaving an unclosed transport behind for the next test's warnings."""
    if not cut:
        writer.close()
        return
    writer.transport.abort()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


def json_answer(code: int, body: Any, reason: str = "OK", close: bool = False) -> bytes:
    payload = json.dumps(body).encode()
    head = f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(payload)}\r\n" + ("Connection: close\r\n" if close else "")
    return head.encode() + b"\r\n" + payload


WATCH_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def event(kind: str, name: str, version: str) -> bytes:
    obj = {"metadata": {"name": name, "resourceVersion": version}}
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def chunked(*parts: bytes) -> bytes:
    """``parts`` as chunks, without the last (empty) chunk."""
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts)
