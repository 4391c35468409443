"""A watch as the API client makes it: one request after another, each resumed from the last
version seen (a BOOKMARK's too: bookmarks are asked for), each with a ``timeoutSeconds`` drawn
between 5 and 10 minutes (as client-go's reflector draws it), so a fleet does not re-watch in
step. A stream the server ends without sending anything is asked again only after a backoff
(capped, jittered), and every request after the first is announced to the client's
``before_request`` (paced and counted). A line is bounded (``http1.MAX_LINE``) and so is what
parsing it can make; a stream silent past its timeout and a grace is a broken one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from kae_deviceplugin.apiserver.http1 import MAX_BODY, MAX_LINE, Connection, Head, lines
from kae_deviceplugin.apiserver.rest_errors import EventError, Refused, Silent, translated
from kae_deviceplugin.apiserver.rest_wire import bounded, decode, selector
from kae_deviceplugin.apiserver.seam import JsonObject, Kind, WatchStart
from kae_deviceplugin.core.backoff import Backoff

if TYPE_CHECKING:
    from kae_deviceplugin.apiserver.rest_api import RestApi

log = logging.getLogger(__name__)

WATCH_SECONDS = (300, 600)  # timeoutSeconds asked, drawn anew for each request
WATCH_GRACE = 30.0  # past timeoutSeconds without a line or the end: the stream is broken
WATCH_SILENCE: float | None = None  # a test's fixed silence bound instead (None: the above)
WATCH_KEPT = 10.0  # a stream that lasted this long was no instant end, even if it sent nothing
WATCH_BACKOFF = (1.0, 30.0)  # first and longest wait before asking again for an empty stream
pause = asyncio.sleep  # how a watch waits out its backoff (a test records the waits)


async def watch(
    api: RestApi, kind: Kind, field_selector: Mapping[str, str], start: WatchStart | None = None
) -> AsyncIterator[tuple[str, JsonObject]]:
    version = start
    loop = asyncio.get_running_loop()
    empty = Backoff(*WATCH_BACKOFF, rng=api.rng)  # streams ended at once, in a row
    further = False
    async with translated("watch", kind.plural, None, api.server, stream=True):
        while True:  # a clean end is resumed from the last event seen, as the seam says
            wait = empty.not_before("watch") - loop.time()
            if wait > 0:
                await pause(wait)
            if further:
                await api.before("watch", kind)
            further = True
            began, sent = loop.time(), False
            # Closed at once when the caller stops reading, not when it is collected: the
            # stream's connection goes with it.
            query = _watch_query(api, field_selector, version)
            async with contextlib.aclosing(_stream(api, api.path(kind, None), query, kind)) as got:
                async for event, obj in got:
                    sent = True
                    version = obj["metadata"]["resourceVersion"]
                    if event != "BOOKMARK":  # a bookmark only moves the version on
                        yield event, obj
            if sent or loop.time() - began >= WATCH_KEPT:
                empty.succeeded("watch")
                continue
            delay = empty.failed("watch", loop.time())
            if empty.failures("watch") == 3:  # said once per run of them, not each time
                log.info("the API server ends each watch of %s at once; asking again "
                         "after up to %g s", kind.plural, WATCH_BACKOFF[1])  # fmt: skip
            log.debug("watch of %s ended empty; again in %.1f s", kind.plural, delay)


def _watch_query(
    api: RestApi, field_selector: Mapping[str, str], version: str | None
) -> dict[str, str]:
    seconds = api.rng.randint(*WATCH_SECONDS)
    query = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": str(seconds)}
    if field_selector:
        query["fieldSelector"] = selector(field_selector)
    if version is not None:
        query["resourceVersion"] = version
    return query


async def _stream(
    api: RestApi, path: str, query: Mapping[str, str], kind: Kind
) -> AsyncGenerator[tuple[str, JsonObject]]:
    """One watch request's events, until the server ends it; ``Refused`` for a refusal,
    ``EventError`` for an ERROR event (410: the version is too old)."""
    target = f"{path}?{urlencode(query)}"
    silence = WATCH_SILENCE or int(query["timeoutSeconds"]) + WATCH_GRACE
    used = await api.target.authorization.header()
    connection, head = await _open_watch(api, target)
    try:
        if head.status == 401 and await api.target.authorization.refresh(used):
            api.pool.release_held(connection)
            await api.before("watch", kind)
            connection, head = await _open_watch(api, target)
        if head.status != 200:
            async with bounded():
                raise Refused(head, await connection.body(head))
        parts = connection.chunks() if head.chunked else _whole(connection, head)
        events = lines(parts, min(MAX_LINE, api.max_body))
        while True:
            try:
                async with asyncio.timeout(silence):
                    line = await anext(events)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise Silent(f"no event nor end of the watch in {silence:g} s") from None
            yield event(line, api.max_body)
    finally:
        api.pool.release_held(connection)


async def _open_watch(api: RestApi, target: str) -> tuple[Connection, Head]:
    """A new connection (a watch holds it) with the watch's answer head read."""
    headers = await api.headers(b"", "")
    async with bounded():
        connection = await api.pool.hold()
    try:
        async with bounded():
            await connection.send("GET", target, headers, b"")
            return connection, await connection.head()
    except BaseException:
        api.pool.release_held(connection)
        raise


async def _whole(connection: Connection, head: Head) -> AsyncIterator[bytes]:
    """A watch answered with a body of known length (no proxy we know does): all of it."""
    async with bounded():
        data = await connection.body(head)
    yield data


def event(line: bytes, limit: int = MAX_BODY) -> tuple[str, JsonObject]:
    """(type, object) of a watch line; ``EventError`` for an ERROR event; ValueError,
    KeyError or TypeError for a line that is no event."""
    event = decode(line, limit)
    if not isinstance(event, dict):
        raise TypeError(f"a watch line of a JSON {type(event).__name__}, not an event")
    kind, obj = event["type"], event["object"]
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise TypeError(f"a watch event of type {type(kind).__name__}")
    if kind == "ERROR":
        raise EventError(obj)
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("resourceVersion"), str):
        raise TypeError(f"a {kind} event without metadata.resourceVersion")
    return kind, obj
