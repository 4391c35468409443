"""HTTP/1.1 over asyncio streams, as much of it as the API client needs (no library).

One request at a time per ``Connection``; a response is read whole (``Content-Length``, chunked,
or until the server closes) or, for a watch, line by line off its chunked body. Every wait is
the caller's to bound (``asyncio.timeout``): nothing here waits without end on its own. The
``ssl`` module is imported only by whoever makes a TLS context, so a plain-http client (the
tests' API server) never loads OpenSSL.

Every size is bounded by the connection's ``max_body``: a body, however delimited (an endless
chunked one too), stops at it with ``ProtocolError``, and so does a watch line that never ends;
its pieces are joined once, when its newline comes, never re-copied per chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

# The daemon reads a Node, a claim and one node's slices (an object is at most ~1.5 MiB in
# etcd, a node's pool of 384 devices ~0.5 MiB): 4 MiB holds any of them, and parsing it cannot
# outgrow the pod's memory (``rest_wire.decode`` bounds the objects a body may make too).
MAX_BODY = 4 * 1024 * 1024
MAX_LINE = 2 * 1024 * 1024  # one watch event: an object and its envelope
HEAD_LIMIT = 256 * 1024  # the stream's line limit: a status line and headers, never a body
BODILESS = frozenset({204, 304})  # and every 1xx: no body whatever the headers say


class ProtocolError(Exception):
    """The server's bytes are no HTTP/1.1 response we can read."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy: where it listens and the ``Proxy-Authorization`` it wants, if any."""

    host: str
    port: int
    authorization: str | None = None


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the API server listens: ``tls`` is None for plain http."""

    host: str
    port: int
    tls: ssl.SSLContext | None = None
    server_name: str | None = None  # the kubeconfig's tls-server-name: checked instead of host
    proxy: Proxy | None = None  # an HTTP proxy the connection tunnels through (CONNECT)

    @property
    def tls_name(self) -> str:
        return self.server_name or self.host

    @property
    def authority(self) -> str:
        """The ``Host`` header: an IPv6 address in brackets, the port always (as in the URL)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Head:
    """A response's status line and headers (names in lower case)."""

    status: int
    reason: str
    headers: Mapping[str, str]
    version: str = "HTTP/1.1"

    @property
    def chunked(self) -> bool:
        return "chunked" in self.headers.get("transfer-encoding", "").lower()

    @property
    def keeps_alive(self) -> bool:
        """HTTP/1.1 unless the server says close; an HTTP/1.0 answer never (we ask no
        keep-alive of 1.0, and a 1.0 server that keeps one open may not frame the next)."""
        return self.version == "HTTP/1.1" and self.headers.get("connection", "").lower() != "close"

    @property
    def bodiless(self) -> bool:
        return self.status in BODILESS or 100 <= self.status < 200


class Connection:
    """One HTTP/1.1 connection to an ``Endpoint``; ``reusable`` once a response was read whole
    and the server did not ask to close."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_body: int = MAX_BODY
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.reusable = False
        self.max_body = max_body

    @classmethod
    async def open(cls, endpoint: Endpoint, max_body: int = MAX_BODY) -> Connection:
        if endpoint.proxy is not None:
            from kae_deviceplugin.apiserver.proxy import tunnel  # noqa: PLC0415 -- a proxy only

            reader, writer = await tunnel(endpoint, HEAD_LIMIT)
            return cls(reader, writer, max_body)
        reader, writer = await asyncio.open_connection(
            endpoint.host,
            endpoint.port,
            ssl=endpoint.tls,
            server_hostname=endpoint.tls_name if endpoint.tls is not None else None,
            limit=HEAD_LIMIT,
        )
        return cls(reader, writer, max_body)

    @property
    def stale(self) -> bool:
        """The server closed it while it was idle (seen as soon as the loop read the FIN)."""
        return self.reader.at_eof() or self.writer.is_closing()

    async def send(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> None:
        self.reusable = False
        lines = [f"{method} {target} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body)}")
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await self.writer.drain()

    async def head(self) -> Head:
        """The status line and headers; ``ProtocolError`` for anything else (a 1xx is skipped)."""
        while True:
            raw = await self.reader.readuntil(b"\r\n\r\n")
            head = parse_head(raw)
            if not 100 <= head.status < 200:
                return head

    async def body(self, head: Head) -> bytes:
        """The whole body of ``head``'s response; the connection is reusable afterwards when
        its length was known and the server keeps it open."""
        if head.bodiless:
            data = b""
        elif head.chunked:
            data = b"".join([part async for part in self.chunks()])
        elif "content-length" in head.headers:
            length = _length(head.headers["content-length"], self.max_body)
            data = await self.reader.readexactly(length)
        else:  # neither: the body runs until the server closes (HTTP/1.0 style)
            return await self._until_closed()
        self.reusable = head.keeps_alive
        return data

    async def _until_closed(self) -> bytes:
        """Every byte until the server closes, at most ``max_body`` of them."""
        parts: list[bytes] = []
        total = 0
        while part := await self.reader.read(65536):
            total += len(part)
            if total > self.max_body:
                raise ProtocolError(f"a body larger than {self.max_body} bytes")
            parts.append(part)
        return b"".join(parts)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The data of each chunk of a chunked body, until its last (empty) chunk and trailers;
        ``IncompleteReadError`` when the server closes before that last chunk."""
        total = 0
        while True:
            size_line = await self.reader.readuntil(b"\r\n")
            size = _chunk_size(size_line)
            if size == 0:
                while await self.reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailer fields: none we use
                return
            total += size
            if total > self.max_body:
                raise ProtocolError(f"a body larger than {self.max_body} bytes")
            data = await self.reader.readexactly(size + 2)
            if data[-2:] != b"\r\n":
                raise ProtocolError("a chunk that does not end in CRLF")
            yield data[:-2]

    def close(self) -> None:
        """Drop the connection now: the socket is closed at the loop's next turn. Not
        ``writer.close()``: over TLS that starts a close_notify exchange which keeps the socket
        open until the server answers, and a loop closed meanwhile leaks it."""
        self.reusable = False
        self.writer.transport.abort()


async def lines(chunks: AsyncIterator[bytes], limit: int = MAX_LINE) -> AsyncIterator[bytes]:
    """The newline-ended lines of a chunked body (a watch: one JSON event a line), whatever
    the chunk boundaries; a last line without its newline too. A line's pieces are kept apart
    until its newline comes and joined once (a line that never ends costs O(n), not O(n²));
    ``ProtocolError`` once a line passes ``limit`` bytes."""
    pending: list[bytes] = []
    held = 0
    async for data in chunks:
        if b"\n" not in data:
            held += len(data)
            if held > limit:
                raise ProtocolError(f"a watch line longer than {limit} bytes")
            pending.append(data)
            continue
        first, *whole, rest = data.split(b"\n")
        if held + len(first) > limit:
            raise ProtocolError(f"a watch line longer than {limit} bytes")
        pending.append(first)
        for line in (b"".join(pending), *whole):
            if len(line) > limit:
                raise ProtocolError(f"a watch line longer than {limit} bytes")
            if line.strip():
                yield line
        pending, held = [rest], len(rest)
    last = b"".join(pending)
    if last.strip():
        yield last


def parse_head(raw: bytes) -> Head:
    text = raw.decode("latin-1").split("\r\n")
    version, _, rest = text[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.0", "HTTP/1.1") or not code.isdigit() or len(code) != 3:
        raise ProtocolError(f"no HTTP/1.1 status line: {text[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in text[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return Head(int(code), reason.strip(), headers, version)


def _length(text: str, limit: int) -> int:
    if not text.strip().isdigit():
        raise ProtocolError(f"a Content-Length we do not read: {text[:40]!r}")
    if int(text) > limit:
        raise ProtocolError(f"a body larger than {limit} bytes (Content-Length {int(text)})")
    return int(text)


def _chunk_size(line: bytes) -> int:
    digits = line.split(b";", 1)[0].strip()  # a chunk extension after ";" means nothing to us
    if not digits or digits.strip(b"0123456789abcdefABCDEF") or len(digits) > 16:
        raise ProtocolError(f"no chunk size: {line[:40]!r}")
    return int(digits, 16)
