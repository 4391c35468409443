"""What every request of the API client shares: its time bound, and how a JSON body is read
(bounded in size and in what parsing it can make) and written."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from kae_deviceplugin.apiserver.http1 import MAX_BODY
from kae_deviceplugin.apiserver.rest_errors import Silent
from kae_deviceplugin.apiserver.seam import JsonObject, Kind

REQUEST_TIMEOUT = 10.0  # per call: a slow API server must not wedge a kubelet call for 45 s
# json.loads makes ~30 bytes of objects per byte of "{}," (a dict and its list slot): a body
# may open at most one object or array per this many bytes, which bounds a parse's memory to
# ~12x the body (strings and numbers: an object header per few bytes) whatever its shape.
# Real API objects open one per ~50-60 bytes.
MAX_OBJECT_SHARE = 24


@contextlib.asynccontextmanager
async def bounded() -> AsyncIterator[None]:
    """``REQUEST_TIMEOUT`` for what is inside; ``Silent`` (no answer) when it passes."""
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT):
            yield
    except TimeoutError:
        raise Silent(f"no answer within {REQUEST_TIMEOUT:g} s") from None


def decode(data: bytes, limit: int = MAX_BODY) -> Any:
    """JSON of at most ``limit`` bytes opening at most one object or array per
    ``MAX_OBJECT_SHARE`` bytes; ValueError (one line) for anything else, a nesting too deep
    for the parser included."""
    if len(data) > limit:
        raise ValueError(f"an answer larger than {limit} bytes")
    containers = data.count(b"{") + data.count(b"[")  # in strings too: an over-count, safe
    if containers > max(len(data) // MAX_OBJECT_SHARE, 64):
        raise ValueError(f"{containers} objects or arrays in {len(data)} bytes, more than an "
                         "API object has")  # fmt: skip
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested deeper than the parser follows") from None


def selector(fields: Mapping[str, str]) -> str:
    return ",".join(f"{name}={value}" for name, value in fields.items())


def typed(kind: Kind, body: JsonObject) -> JsonObject:
    """``body`` with its apiVersion and kind, which the server requires (filled where unset)."""
    return {"apiVersion": kind.api_version, "kind": kind.kind, **body}
