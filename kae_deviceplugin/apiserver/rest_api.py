"""``ApiServer`` over a small HTTP/1.1 client of our own (``http1``): the daemon's API client.

The driver asks eight things of the API server, all plain JSON, and an API client library
brought ~10 MiB resident for them (httpx, httpcore, anyio and lightkube's models), a fifth of
the daemon at rest. So the requests are made here, as the library made them: the same paths,
``fieldManager`` on writes, a server-side apply as ``application/apply-patch+yaml`` with
``force``, a watch resumed from its last event when the server ends it cleanly. Connections are
kept alive for the next call. Every call is bounded (``REQUEST_TIMEOUT``), and so is a watch's
silence: it asks the server to end it after ``WATCH_SECONDS``, and a stream that neither sends
nor ends for longer than that is a broken one (a server gone without a reset, a cut path).

Every HTTP request a call makes beyond its first (a list's next page, a watch asked again, a
request repeated after a 401) is announced to ``before_request`` first, so whoever paces and
counts calls (``paced.PacedApi``) paces and counts requests. A watch the server ends without
sending anything is asked again only after a backoff (capped, jittered), never at once. A
body is bounded (``http1.MAX_BODY``) and so is what parsing it can make (``MAX_OBJECT_SHARE``):
no answer can outgrow the pod's memory limit.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from kae_deviceplugin.apiserver.credentials import Target, from_kubeconfig, from_service_account
from kae_deviceplugin.apiserver.http1 import MAX_BODY, MAX_LINE, Connection, Head, lines
from kae_deviceplugin.apiserver.http_pool import Pool
from kae_deviceplugin.apiserver.kubeconfig import check_service_account, load_kubeconfig
from kae_deviceplugin.apiserver.rest_errors import EventError, Refused, Silent, translated
from kae_deviceplugin.apiserver.seam import JsonObject, Kind, WatchStart
from kae_deviceplugin.core.backoff import Backoff
from kae_deviceplugin.errors import EXIT_ENVIRONMENT, EXIT_USAGE, KubeconfigError

log = logging.getLogger(__name__)

FIELD_MANAGER = "kae-deviceplugin"
REQUEST_TIMEOUT = 10.0  # per call: a slow API server must not wedge a kubelet call for 45 s
# The server ends a watch after timeoutSeconds and it is resumed; drawn anew for each request
# between these (as client-go's reflector does), so a fleet of nodes does not re-watch in step.
WATCH_SECONDS = (300, 600)
WATCH_GRACE = 30.0  # past timeoutSeconds without a line or the end: the stream is broken
WATCH_SILENCE: float | None = None  # a test's fixed silence bound instead (None: the above)
WATCH_KEPT = 10.0  # a stream that lasted this long was no instant end, even if it sent nothing
WATCH_BACKOFF = (1.0, 30.0)  # first and longest wait before asking again for an empty stream
APPLY = "application/apply-patch+yaml"  # JSON is YAML: the body is the object's JSON
USER_AGENT = "kae-deviceplugin"
# json.loads makes ~30 bytes of objects per byte of "{}," (a dict and its list slot): a body
# may open at most one object or array per this many bytes, which bounds a parse's memory to
# ~12x the body (strings and numbers: an object header per few bytes) whatever its shape.
# Real API objects open one per ~50-60 bytes.
MAX_OBJECT_SHARE = 24

pause = asyncio.sleep  # how a watch waits out its backoff (a test records the waits)

# Called before each request a call makes beyond its first: (verb, kind).
BeforeRequest = Callable[[str, Kind], Awaitable[None]]


class RestApi:
    """The calls of ``seam.ApiServer`` to one ``Target``; ``server`` (its URL) is named in
    every error, so a message says which API server refused or was away."""

    def __init__(
        self,
        target: Target,
        *,
        max_body: int = MAX_BODY,
        page_size: int | None = None,
        before_request: BeforeRequest | None = None,
    ) -> None:
        self.target = target
        self.server = target.server
        self.max_body = max_body
        self.page_size = page_size  # a list asks pages of this many (``limit``), each bounded
        self.before_request = before_request
        self.rng = random.Random()
        self._pool = Pool(target.endpoint, max_body)

    # -- the seam -------------------------------------------------------------------------------

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        path = self._path(kind, namespace, name)
        answer = await self._call("get", kind, name, "GET", path)
        if not isinstance(answer, dict):
            async with translated("get", kind.plural, name, self.server):
                raise TypeError(f"a JSON {type(answer).__name__} where an object belongs")
        return answer

    async def list(self, kind: Kind, field_selector: Mapping[str, str]) -> list[JsonObject]:
        items, _ = await self.list_versioned(kind, field_selector)
        return items

    async def list_versioned(
        self, kind: Kind, field_selector: Mapping[str, str]
    ) -> tuple[builtins.list[JsonObject], str]:
        query = {"fieldSelector": _selector(field_selector)} if field_selector else {}
        if self.page_size:
            query["limit"] = str(self.page_size)
        items: builtins.list[JsonObject] = []
        further = False
        while True:  # the server pages only when asked to (limit): follow it if it does
            path = self._path(kind, None)
            page = await self._call("list", kind, None, "GET", path, query=query, further=further)
            if not isinstance(page, dict) or not isinstance(page.get("items") or [], list):
                async with translated("list", kind.plural, None, self.server):
                    raise TypeError("a list answer without a list of items")
            items += page.get("items") or []
            further = True
            found = page.get("metadata")
            metadata: JsonObject = found if isinstance(found, dict) else {}
            if not metadata.get("continue"):
                return items, str(metadata.get("resourceVersion") or "")
            query = {**query, "continue": metadata["continue"]}

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject:
        metadata = body["metadata"]
        path = self._path(kind, metadata.get("namespace"))
        query = {"fieldManager": FIELD_MANAGER}
        made: JsonObject = await self._call(
            "create", kind, metadata.get("name"), "POST", path, query=query, body=_typed(kind, body)
        )
        return made

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject:
        metadata = body["metadata"]
        path = self._path(kind, metadata.get("namespace"), metadata["name"])
        query = {"fieldManager": FIELD_MANAGER}
        replaced: JsonObject = await self._call(
            "replace", kind, metadata["name"], "PUT", path, query=query, body=_typed(kind, body)
        )
        return replaced

    async def apply_status(self, kind: Kind, body: JsonObject) -> JsonObject:
        metadata = body["metadata"]
        path = self._path(kind, metadata.get("namespace"), metadata["name"], "status")
        query = {"fieldManager": FIELD_MANAGER, "force": "true"}
        applied: JsonObject = await self._call(
            "apply",
            kind,
            f"{metadata['name']}/status",
            "PATCH",
            path,
            query=query,
            body=body,
            content_type=APPLY,
        )
        return applied

    async def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        await self._call("delete", kind, name, "DELETE", self._path(kind, namespace, name))

    async def watch(
        self, kind: Kind, field_selector: Mapping[str, str], start: WatchStart | None = None
    ) -> AsyncIterator[tuple[str, JsonObject]]:
        version = start
        loop = asyncio.get_running_loop()
        empty = Backoff(*WATCH_BACKOFF, rng=self.rng)  # streams ended at once, in a row
        further = False
        async with translated("watch", kind.plural, None, self.server, stream=True):
            while True:  # a clean end is resumed from the last event seen, as the seam says
                wait = empty.not_before("watch") - loop.time()
                if wait > 0:
                    await pause(wait)
                if further:
                    await self._before("watch", kind)
                further = True
                began, sent = loop.time(), False
                # Closed at once when the caller stops reading, not when it is collected: the
                # stream's connection goes with it.
                query = self._watch_query(field_selector, version)
                async with contextlib.aclosing(
                    self._stream(self._path(kind, None), query, kind)
                ) as got:
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
        self, field_selector: Mapping[str, str], version: str | None
    ) -> dict[str, str]:
        seconds = self.rng.randint(*WATCH_SECONDS)
        query = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": str(seconds)}
        if field_selector:
            query["fieldSelector"] = _selector(field_selector)
        if version is not None:
            query["resourceVersion"] = version
        return query

    async def _before(self, verb: str, kind: Kind) -> None:
        if self.before_request is not None:
            await self.before_request(verb, kind)

    async def close(self) -> None:
        await self._pool.close()

    # -- requests -------------------------------------------------------------------------------

    def _path(
        self, kind: Kind, namespace: str | None, name: str | None = None, sub: str | None = None
    ) -> str:
        parts = (
            [self.target.prefix, "apis", kind.group] if kind.group else [self.target.prefix, "api"]
        )
        parts.append(kind.version)
        if kind.namespaced and (namespace or name is not None):
            parts += ["namespaces", quote(namespace or "default", safe="")]
        parts.append(kind.plural)
        parts += [quote(part, safe="") for part in (name, sub) if part is not None]
        return "/".join(parts)

    async def _call(
        self,
        verb: str,
        kind: Kind,
        name: str | None,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: JsonObject | None = None,
        content_type: str = "application/json",
        further: bool = False,
    ) -> Any:
        """One request's JSON answer (None for an empty one), or ApiError; ``further``: not the
        call's first request (``before_request`` is asked first)."""
        target = f"{path}?{urlencode(query)}" if query else path
        payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        async with translated(verb, kind.plural, name, self.server):
            if further:
                await self._before(verb, kind)
            await self.target.authorization.header()  # an exec plugin has a bound of its own
            async with _bounded():
                head, data = await self._authorized(verb, kind, method, target, payload=payload,
                                                    content_type=content_type)  # fmt: skip
            if not 200 <= head.status < 300:
                raise Refused(head, data)
            return decode(data, self.max_body) if data.strip() else None

    async def _authorized(
        self, verb: str, kind: Kind, method: str, target: str, *, payload: bytes, content_type: str
    ) -> tuple[Head, bytes]:
        """The answer, asked again once with the token read anew after a 401 (a rotated
        service-account token, an exec plugin's expired one)."""
        used = await self.target.authorization.header()
        answer = await self._exchange(method, target, payload, content_type)
        if answer[0].status == 401 and await self.target.authorization.refresh(used):
            await self._before(verb, kind)
            answer = await self._exchange(method, target, payload, content_type)
        return answer

    async def _headers(self, payload: bytes, content_type: str) -> dict[str, str]:
        headers = {
            "Host": self.target.endpoint.authority,
            "User-Agent": USER_AGENT,
            "Accept": "application/json",
        }
        authorization = await self.target.authorization.header()
        if authorization is not None:
            headers["Authorization"] = authorization
        if self.target.impersonate:
            headers["Impersonate-User"] = self.target.impersonate
        if payload:
            headers["Content-Type"] = content_type
        return headers

    async def _exchange(
        self, method: str, target: str, payload: bytes, content_type: str
    ) -> tuple[Head, bytes]:
        headers = await self._headers(payload, content_type)
        return await self._pool.exchange(method, target, headers, payload)

    async def _stream(
        self, path: str, query: Mapping[str, str], kind: Kind
    ) -> AsyncGenerator[tuple[str, JsonObject]]:
        """One watch request's events, until the server ends it; ``Refused`` for a refusal,
        ``EventError`` for an ERROR event (410: the version is too old)."""
        target = f"{path}?{urlencode(query)}"
        silence = WATCH_SILENCE or int(query["timeoutSeconds"]) + WATCH_GRACE
        used = await self.target.authorization.header()
        connection, head = await self._open_watch(target)
        try:
            if head.status == 401 and await self.target.authorization.refresh(used):
                self._pool.release_held(connection)
                await self._before("watch", kind)
                connection, head = await self._open_watch(target)
            if head.status != 200:
                async with _bounded():
                    raise Refused(head, await connection.body(head))
            parts = connection.chunks() if head.chunked else _whole(connection, head)
            events = lines(parts, min(MAX_LINE, self.max_body))
            while True:
                try:
                    async with asyncio.timeout(silence):
                        line = await anext(events)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise Silent(f"no event nor end of the watch in {silence:g} s") from None
                yield _event(line, self.max_body)
        finally:
            self._pool.release_held(connection)

    async def _open_watch(self, target: str) -> tuple[Connection, Head]:
        """A new connection (a watch holds it) with the watch's answer head read."""
        headers = await self._headers(b"", "")
        async with _bounded():
            connection = await self._pool.hold()
        try:
            async with _bounded():
                await connection.send("GET", target, headers, b"")
                return connection, await connection.head()
        except BaseException:
            self._pool.release_held(connection)
            raise


@contextlib.asynccontextmanager
async def _bounded() -> AsyncIterator[None]:
    """``REQUEST_TIMEOUT`` for what is inside; ``Silent`` (no answer) when it passes."""
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT):
            yield
    except TimeoutError:
        raise Silent(f"no answer within {REQUEST_TIMEOUT:g} s") from None


async def _whole(connection: Connection, head: Head) -> AsyncIterator[bytes]:
    """A watch answered with a body of known length (no proxy we know does): all of it."""
    async with _bounded():
        data = await connection.body(head)
    yield data


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


def _event(line: bytes, limit: int = MAX_BODY) -> tuple[str, JsonObject]:
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


def _selector(fields: Mapping[str, str]) -> str:
    return ",".join(f"{name}={value}" for name, value in fields.items())


def _typed(kind: Kind, body: JsonObject) -> JsonObject:
    """``body`` with its apiVersion and kind, which the server requires (filled where unset)."""
    return {"apiVersion": kind.api_version, "kind": kind.kind, **body}


def connect(kubeconfig: Path | None) -> RestApi:
    """A client from a kubeconfig file (a host process), else the pod's service account;
    KubeconfigError naming the file and what is wrong with it when neither gives one."""
    if kubeconfig is not None:
        content, server = load_kubeconfig(kubeconfig)
        return client_for(content, server, kubeconfig)
    server = check_service_account()
    try:
        return RestApi(from_service_account(server))
    except Exception as err:  # the CA file unreadable or no PEM
        said = f"no client for {server} can be made from it: {_first_line(err)}"
        raise KubeconfigError(f"the pod's service account: {said}", code=EXIT_ENVIRONMENT) from err


def client_for(content: Mapping[str, Any], server: str, where: Path, **options: Any) -> RestApi:
    """A client for a checked kubeconfig's current context (``options``: ``RestApi``'s, and
    ``show_stderr`` for an exec plugin's); KubeconfigError naming ``where`` when none can be
    made. Running without TLS verification is said once, as a warning, here."""
    show_stderr = bool(options.pop("show_stderr", False))
    try:
        target = from_kubeconfig(content, server, where, show_stderr=show_stderr)
    except Exception as err:  # a CA or key file unreadable or no PEM, a field of the wrong type
        raise KubeconfigError(f"{where}: no client for {server} can be made from it: "
                              f"{_first_line(err)}", code=EXIT_USAGE) from err  # fmt: skip
    if target.insecure:
        said = "anyone on the path can read and change what this client asks"
        log.warning("TLS verification of %s is off (insecure-skip-tls-verify in %s): %s",
                    server, where, said)  # fmt: skip
    return RestApi(target, **options)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
