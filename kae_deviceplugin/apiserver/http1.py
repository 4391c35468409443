"""HTTP/1.1 over asyncio streams, as much of it as the API client needs (no library).

One request at a time per ``Connection``; a response is read whole (``Content-Length``, chunked,
or until the server closes) or, for a watch, line by line off its chunked body. Every wait is
the caller's to bound (``asyncio.timeout``): nothing here waits without end on its own. The
``ssl`` module is imported only by whoever makes a TLS context, so a plain-http client (the
tests' API server) never loads OpenSSL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

MAX_BODY = 256 * 1024 * 1024  # a list of every slice of a big cluster fits; a runaway does not
HEAD_LIMIT = 256 * 1024  # the stream's line limit: a status line and headers, never a body


class ProtocolError(Exception):
    """The server's bytes are no HTTP/1.1 response we can read."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the API server listens: ``tls`` is None for plain http."""

    host: str
    port: int
    tls: ssl.SSLContext | None = None

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

    @property
    def chunked(self) -> bool:
        return "chunked" in self.headers.get("transfer-encoding", "").lower()

    @property
    def keeps_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"


class Connection:
    """One HTTP/1.1 connection to an ``Endpoint``; ``reusable`` once a response was read whole
    and the server did not ask to close."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reusable = False

    @classmethod
    async def open(cls, endpoint: Endpoint) -> Connection:
        server_hostname = endpoint.host if endpoint.tls is not None else None
        reader, writer = await asyncio.open_connection(
            endpoint.host,
            endpoint.port,
            ssl=endpoint.tls,
            server_hostname=server_hostname,
            limit=HEAD_LIMIT,
        )
        return cls(reader, writer)

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
        if head.chunked:
            data = b"".join([part async for part in self.chunks()])
        elif "content-length" in head.headers:
            length = _length(head.headers["content-length"])
            data = await self.reader.readexactly(length)
        else:  # neither: the body runs until the server closes (HTTP/1.0 style)
            data = await self.reader.read(MAX_BODY + 1)
            if len(data) > MAX_BODY:
                raise ProtocolError(f"a body larger than {MAX_BODY} bytes")
            return data
        self.reusable = head.keeps_alive
        return data

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
            if total > MAX_BODY:
                raise ProtocolError(f"a body larger than {MAX_BODY} bytes")
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


async def lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The newline-ended lines of a chunked body (a watch: one JSON event a line), whatever
    the chunk boundaries; a last line without its newline too."""
    pending = b""
    async for data in chunks:
        pending += data
        *whole, pending = pending.split(b"\n")
        for line in whole:
            if line.strip():
                yield line
    if pending.strip():
        yield pending


def parse_head(raw: bytes) -> Head:
    text = raw.decode("latin-1").split("\r\n")
    version, _, rest = text[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not code.isdigit() or len(code) != 3:
        raise ProtocolError(f"no HTTP/1.1 status line: {text[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in text[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return Head(int(code), reason.strip(), headers)


def _length(text: str) -> int:
    if not text.strip().isdigit() or int(text) > MAX_BODY:
        raise ProtocolError(f"a Content-Length we do not read: {text[:40]!r}")
    return int(text)


def _chunk_size(line: bytes) -> int:
    digits = line.split(b";", 1)[0].strip()  # a chunk extension after ";" means nothing to us
    if not digits or digits.strip(b"0123456789abcdefABCDEF") or len(digits) > 16:
        raise ProtocolError(f"no chunk size: {line[:40]!r}")
    return int(digits, 16)
