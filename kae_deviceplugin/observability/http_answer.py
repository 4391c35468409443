"""From a request head to a whole response: the request line and headers read, the route called,
its answer encoded. The server (http_server.py) hands heads in; the routes are http.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import NamedTuple
from urllib.parse import urlsplit

from kae_deviceplugin.observability.http_server import Answer
from kae_deviceplugin.observability.http_wire import plain_response

log = logging.getLogger(__name__)


class Response(NamedTuple):
    status: int
    content_type: str
    body: bytes


Headers = Mapping[str, str]  # request header names in lower case -> the first value given
Route = Callable[[Headers], Response]
TEXT = "text/plain; charset=utf-8"
# As http.client allows: more is an attack or a bug, answered 400.
MAX_HEADERS = 100


def text(status: int, message: str) -> Response:
    return Response(status, TEXT, (message + "\n").encode())


def route_answer(routes: Mapping[str, Route]) -> Answer:
    """The server's answer function: a request head in, a whole response out."""

    def answer(head: bytes) -> bytes:
        request_line, _, rest = head.partition(b"\n")
        parts = request_line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return encode(text(400, "bad request line"), body=True)
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return encode(text(405, "only GET and HEAD"), body=True)
        headers = parse_headers(rest)
        if headers is None:
            return encode(text(400, "bad request headers"), body=True)
        reply = _route(routes, urlsplit(target).path, headers)
        log.debug("%s %s -> %d", method, target[:200], reply.status)
        return encode(reply, body=method == "GET")

    return answer


def parse_headers(block: bytes) -> dict[str, str] | None:
    """The header fields of a request head (after its request line); None past MAX_HEADERS.

    Written here rather than taken from ``http.client``: that module (with the ``email``
    package it parses with) is ~1 MiB resident, loaded for the one header the routes read.
    Lenient as ``http.client`` is: a line without a colon is skipped, a folded line continues
    the field before it.
    """
    headers: dict[str, str] = {}
    last = ""
    # Lines end at LF (CRLF on the wire), as http.client splits them; str.splitlines would also
    # split at form feeds and other separators inside a value.
    for count, raw_line in enumerate(block.decode("latin-1").split("\n")):
        line = raw_line.removesuffix("\r")
        if not line:
            break
        if count >= MAX_HEADERS:
            return None
        if line[0] in " \t":
            if last:
                headers[last] = f"{headers[last]} {line.strip()}".strip()
            continue
        name, colon, value = line.partition(":")
        if not colon:
            continue
        name = name.strip().lower()
        last = "" if name in headers else name  # a repeated field: the first one counts
        if last:
            headers[last] = value.strip()
    return headers


def _route(routes: Mapping[str, Route], path: str, headers: Headers) -> Response:
    route = routes.get(path)
    if route is None:
        return text(404, "not found; try /metrics, /healthz, /readyz or /allocations")
    try:
        return route(headers)
    except Exception:
        log.exception("answering %s failed", path)
        return text(500, "internal error; see the plugin's log")


def encode(reply: Response, body: bool) -> bytes:
    phrase = HTTPStatus(reply.status).phrase
    return plain_response(reply.status, phrase, reply.body, reply.content_type, head_only=not body)
