"""``ApiServer`` over a small HTTP/1.1 client of our own (``http1``): the daemon's API client.

The driver asks eight things of the API server, all plain JSON, and an API client library
brought ~10 MiB resident for them (httpx, httpcore, anyio and lightkube's models), a fifth of
the daemon at rest. So the requests are made here, as the library made them: the same paths,
``fieldManager`` on writes, a server-side apply as ``application/apply-patch+yaml`` with
``force``, a watch resumed from its last event when the server ends it cleanly. Connections are
kept alive for the next call. Every call is bounded (``rest_wire.REQUEST_TIMEOUT``), and so is
a watch's silence (``rest_watch``: a stream that neither sends nor ends past the timeout it
asked is a broken one: a server gone without a reset, a cut path).

Every HTTP request a call makes beyond its first (a list's next page, a watch asked again, a
request repeated after a 401) is announced to ``before_request`` first, so whoever paces and
counts calls (``paced.PacedApi``) paces and counts requests. A watch the server ends without
sending anything is asked again only after a backoff (capped, jittered), never at once. A
body is bounded (``http1.MAX_BODY``) and so is what parsing it can make
(``rest_wire.MAX_OBJECT_SHARE``): no answer can outgrow the pod's memory limit.
"""

from __future__ import annotations

import builtins
import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from kae_deviceplugin.apiserver import rest_watch
from kae_deviceplugin.apiserver.credentials import Target, from_kubeconfig, from_service_account
from kae_deviceplugin.apiserver.http1 import MAX_BODY, Head
from kae_deviceplugin.apiserver.http_pool import Pool
from kae_deviceplugin.apiserver.kubeconfig import check_service_account, load_kubeconfig
from kae_deviceplugin.apiserver.rest_errors import Refused, translated
from kae_deviceplugin.apiserver.rest_wire import REQUEST_TIMEOUT, bounded, decode, selector, typed
from kae_deviceplugin.apiserver.seam import JsonObject, Kind, WatchStart
from kae_deviceplugin.errors import EXIT_ENVIRONMENT, EXIT_USAGE, KubeconfigError

log = logging.getLogger(__name__)

__all__ = ["REQUEST_TIMEOUT", "RestApi", "client_for", "connect", "decode"]

FIELD_MANAGER = "kae-deviceplugin"
APPLY = "application/apply-patch+yaml"  # JSON is YAML: the body is the object's JSON
USER_AGENT = "kae-deviceplugin"

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
        max_items: int | None = None,
        before_request: BeforeRequest | None = None,
    ) -> None:
        self.target = target
        self.server = target.server
        self.max_body = max_body
        self.page_size = page_size  # a list asks pages of this many (``limit``), each bounded
        self.max_items = max_items  # a list that grows past this many objects is refused
        self.before_request = before_request
        self.rng = random.Random()
        self.pool = Pool(target.endpoint, max_body)

    # -- the seam -------------------------------------------------------------------------------

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        path = self.path(kind, namespace, name)
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
        query = {"fieldSelector": selector(field_selector)} if field_selector else {}
        if self.page_size:
            query["limit"] = str(self.page_size)
        items: builtins.list[JsonObject] = []
        further = False
        while True:  # the server pages only when asked to (limit): follow it if it does
            path = self.path(kind, None)
            page = await self._call("list", kind, None, "GET", path, query=query, further=further)
            if not isinstance(page, dict) or not isinstance(page.get("items") or [], list):
                async with translated("list", kind.plural, None, self.server):
                    raise TypeError("a list answer without a list of items")
            items += page.get("items") or []
            if self.max_items is not None and len(items) > self.max_items:
                async with translated("list", kind.plural, None, self.server):
                    raise ValueError(f"more than {self.max_items} objects")
            further = True
            found = page.get("metadata")
            metadata: JsonObject = found if isinstance(found, dict) else {}
            if not metadata.get("continue"):
                return items, str(metadata.get("resourceVersion") or "")
            query = {**query, "continue": metadata["continue"]}

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject:
        metadata = body["metadata"]
        path = self.path(kind, metadata.get("namespace"))
        query = {"fieldManager": FIELD_MANAGER}
        made: JsonObject = await self._call(
            "create", kind, metadata.get("name"), "POST", path, query=query, body=typed(kind, body)
        )
        return made

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject:
        metadata = body["metadata"]
        path = self.path(kind, metadata.get("namespace"), metadata["name"])
        query = {"fieldManager": FIELD_MANAGER}
        replaced: JsonObject = await self._call(
            "replace", kind, metadata["name"], "PUT", path, query=query, body=typed(kind, body)
        )
        return replaced

    async def apply_status(self, kind: Kind, body: JsonObject) -> JsonObject:
        metadata = body["metadata"]
        path = self.path(kind, metadata.get("namespace"), metadata["name"], "status")
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
        await self._call("delete", kind, name, "DELETE", self.path(kind, namespace, name))

    def watch(
        self, kind: Kind, field_selector: Mapping[str, str], start: WatchStart | None = None
    ) -> AsyncIterator[tuple[str, JsonObject]]:
        return rest_watch.watch(self, kind, field_selector, start)

    async def before(self, verb: str, kind: Kind) -> None:
        """Announce a request beyond a call's first to ``before_request`` (pacing, counting)."""
        if self.before_request is not None:
            await self.before_request(verb, kind)

    async def close(self) -> None:
        await self.pool.close()

    # -- requests -------------------------------------------------------------------------------

    def path(
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
                await self.before(verb, kind)
            await self.target.authorization.header()  # an exec plugin has a bound of its own
            async with bounded():
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
            await self.before(verb, kind)
            answer = await self._exchange(method, target, payload, content_type)
        return answer

    async def headers(self, payload: bytes, content_type: str) -> dict[str, str]:
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
        headers = await self.headers(payload, content_type)
        return await self.pool.exchange(method, target, headers, payload)


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
