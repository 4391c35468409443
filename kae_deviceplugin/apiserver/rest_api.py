"""``ApiServer`` over a small HTTP/1.1 client of our own (``http1``): the daemon's API client.

The driver asks eight things of the API server, all plain JSON, and an API client library
brought ~10 MiB resident for them (httpx, httpcore, anyio and lightkube's models), a fifth of
the daemon at rest. So the requests are made here, as the library made them: the same paths,
``fieldManager`` on writes, a server-side apply as ``application/apply-patch+yaml`` with
``force``, a watch resumed from its last event when the server ends it cleanly. Connections are
kept alive for the next call. Every call is bounded (``REQUEST_TIMEOUT``), and so is a watch's
silence: it asks the server to end it after ``WATCH_SECONDS``, and a stream that neither sends
nor ends for longer than that is a broken one (a server gone without a reset, a cut path).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from kae_deviceplugin.apiserver.credentials import Target, from_kubeconfig, from_service_account
from kae_deviceplugin.apiserver.http1 import Connection, Head, lines
from kae_deviceplugin.apiserver.http_pool import Pool
from kae_deviceplugin.apiserver.kubeconfig import check_service_account, load_kubeconfig
from kae_deviceplugin.apiserver.rest_errors import EventError, Refused, Silent, translated
from kae_deviceplugin.apiserver.seam import JsonObject, Kind, WatchStart
from kae_deviceplugin.errors import EXIT_ENVIRONMENT, EXIT_USAGE, KubeconfigError

FIELD_MANAGER = "kae-deviceplugin"
REQUEST_TIMEOUT = 10.0  # per call: a slow API server must not wedge a kubelet call for 45 s
WATCH_SECONDS = 300  # the server ends a watch this quiet cleanly, and it is resumed
WATCH_SILENCE = WATCH_SECONDS + 30.0  # longer without a line or the end: the stream is broken
APPLY = "application/apply-patch+yaml"  # JSON is YAML: the body is the object's JSON
USER_AGENT = "kae-deviceplugin"


class RestApi:
    """The calls of ``seam.ApiServer`` to one ``Target``; ``server`` (its URL) is named in
    every error, so a message says which API server refused or was away."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.server = target.server
        self._pool = Pool(target.endpoint)

    # -- the seam -------------------------------------------------------------------------------

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        path = self._path(kind, namespace, name)
        answer: JsonObject = await self._call("get", kind, name, "GET", path)
        return answer

    async def list(self, kind: Kind, field_selector: Mapping[str, str]) -> list[JsonObject]:
        items, _ = await self.list_versioned(kind, field_selector)
        return items

    async def list_versioned(
        self, kind: Kind, field_selector: Mapping[str, str]
    ) -> tuple[builtins.list[JsonObject], str]:
        query = {"fieldSelector": _selector(field_selector)} if field_selector else {}
        items: builtins.list[JsonObject] = []
        while True:  # the server pages only when asked to (limit): once, but follow it if it does
            page = await self._call("list", kind, None, "GET", self._path(kind, None), query=query)
            items += page.get("items") or []
            metadata = page.get("metadata") or {}
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
        async with translated("watch", kind.plural, None, self.server, stream=True):
            while True:  # a clean end is resumed from the last event seen, as the seam says
                query = {"watch": "true", "timeoutSeconds": str(WATCH_SECONDS)}
                if field_selector:
                    query["fieldSelector"] = _selector(field_selector)
                if version is not None:
                    query["resourceVersion"] = version
                # Closed at once when the caller stops reading, not when it is collected: the
                # stream's connection goes with it.
                async with contextlib.aclosing(self._stream(self._path(kind, None), query)) as got:
                    async for event, obj in got:
                        version = obj["metadata"]["resourceVersion"]
                        yield event, obj

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
    ) -> Any:
        """One request's JSON answer (None for an empty one), or ApiError."""
        target = f"{path}?{urlencode(query)}" if query else path
        payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        async with translated(verb, kind.plural, name, self.server):
            async with _bounded():
                head, data = await self._authorized(method, target, payload, content_type)
            if not 200 <= head.status < 300:
                raise Refused(head, data)
            return json.loads(data) if data.strip() else None

    async def _authorized(
        self, method: str, target: str, payload: bytes, content_type: str
    ) -> tuple[Head, bytes]:
        """The answer, asked again once with the token read anew after a 401 (a rotated
        service-account token, an exec plugin's expired one)."""
        answer = await self._exchange(method, target, payload, content_type)
        if answer[0].status == 401 and await self.target.authorization.refresh():
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
        if payload:
            headers["Content-Type"] = content_type
        return headers

    async def _exchange(
        self, method: str, target: str, payload: bytes, content_type: str
    ) -> tuple[Head, bytes]:
        headers = await self._headers(payload, content_type)
        return await self._pool.exchange(method, target, headers, payload)

    async def _stream(
        self, path: str, query: Mapping[str, str]
    ) -> AsyncGenerator[tuple[str, JsonObject]]:
        """One watch request's events, until the server ends it; ``Refused`` for a refusal,
        ``EventError`` for an ERROR event (410: the version is too old)."""
        target = f"{path}?{urlencode(query)}"
        connection, head = await self._open_watch(target)
        try:
            if head.status == 401 and await self.target.authorization.refresh():
                self._pool.release_held(connection)
                connection, head = await self._open_watch(target)
            if head.status != 200:
                async with _bounded():
                    raise Refused(head, await connection.body(head))
            parts = connection.chunks() if head.chunked else _whole(connection, head)
            events = lines(parts)
            while True:
                try:
                    async with asyncio.timeout(WATCH_SILENCE):
                        line = await anext(events)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise Silent(f"no event nor end of the watch in {WATCH_SILENCE:g} s") from None
                yield _event(line)
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


def _event(line: bytes) -> tuple[str, JsonObject]:
    """(type, object) of a watch line; ``EventError`` for an ERROR event; ValueError,
    KeyError or TypeError for a line that is no event."""
    event = json.loads(line)
    kind, obj = event["type"], event["object"]
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise TypeError(f"a watch event of type {type(kind).__name__}")
    if kind == "ERROR":
        raise EventError(obj)
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
        where, code = str(kubeconfig), EXIT_USAGE
    else:
        server, where, code = check_service_account(), "the pod's service account", EXIT_ENVIRONMENT
    try:
        if kubeconfig is not None:
            return RestApi(from_kubeconfig(content, server, kubeconfig))
        return RestApi(from_service_account(server))
    except Exception as err:  # a CA or key file unreadable or no PEM, a field of the wrong type
        raise KubeconfigError(
            f"{where}: no client for {server} can be made from it: {_first_line(err)}", code=code
        ) from err


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
