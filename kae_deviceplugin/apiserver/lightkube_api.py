"""``ApiServer`` over lightkube's async client: the one module that imports an API client.

lightkube (typed models for every 1.37 kind, async, field-selector watches, ~23 MiB installed,
pure Python but for msgspec, which has aarch64 wheels) was chosen over the official client (171
MiB with its generated models and aiohttp) and kr8s (no DRA types). Objects cross the seam as
plain JSON dicts: lightkube's generic resources are dict subclasses, so nothing is converted
twice and the front end never sees a lightkube type.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from kae_deviceplugin.apiserver.deferred import API_CLIENT_UNUSED, defer

# Before the client's modules import them: what they import and the driver never runs is made
# importable but left unexecuted until first used (deferred.py says which and why).
defer(*API_CLIENT_UNUSED)

import httpx2  # noqa: E402
from lightkube import AsyncClient, KubeConfig  # noqa: E402
from lightkube.core.exceptions import ApiError as LightkubeApiError  # noqa: E402
from lightkube.generic_resource import (  # noqa: E402
    create_global_resource,
    create_namespaced_resource,
)
from lightkube.types import PatchType  # noqa: E402

from kae_deviceplugin.apiserver.kubeconfig import (  # noqa: E402
    check_service_account,
    load_kubeconfig,
)
from kae_deviceplugin.apiserver.seam import JsonObject, Kind, WatchStart  # noqa: E402
from kae_deviceplugin.errors import (  # noqa: E402
    EXIT_ENVIRONMENT,
    EXIT_USAGE,
    UNREACHABLE,
    ApiError,
    KubeconfigError,
)

FIELD_MANAGER = "kae-deviceplugin"
# httpx logs every request at INFO: a claim read per NodePrepare would be one line each.
logging.getLogger("httpx2").setLevel(logging.WARNING)
REQUEST_TIMEOUT = 10.0  # per call: a slow API server must not wedge a kubelet call for 45 s


@functools.cache
def _resource(kind: Kind) -> Any:
    """lightkube's generic (dict) resource class for ``kind``, made once."""
    make = create_namespaced_resource if kind.namespaced else create_global_resource
    return make(kind.group, kind.version, kind.kind, kind.plural)


def _plain(obj: Any) -> JsonObject:
    """A generic resource as the plain dict it is (typed ones are converted)."""
    return dict(obj) if isinstance(obj, dict) else dict(obj.to_dict())


class LightkubeApi:
    """The calls of ``seam.ApiServer`` on one lightkube ``AsyncClient``; ``server`` (its URL) is
    named in every error, so a message says which API server refused or was away."""

    def __init__(self, client: AsyncClient, server: str = "") -> None:
        self.client = client
        self.server = server

    def _translated(
        self, verb: str, kind: Kind, name: str | None = None, *, stream: bool = False
    ) -> contextlib.AbstractAsyncContextManager[None]:
        return _translated(verb, kind.plural, name, self.server, stream=stream)

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        async with self._translated("get", kind, name):
            return _plain(await self.client.get(_resource(kind), name, namespace=namespace))

    async def list(self, kind: Kind, field_selector: Mapping[str, str]) -> list[JsonObject]:
        async with self._translated("list", kind):
            found = self.client.list(_resource(kind), fields=dict(field_selector))
            return [_plain(obj) async for obj in found]

    async def list_versioned(
        self, kind: Kind, field_selector: Mapping[str, str]
    ) -> tuple[builtins.list[JsonObject], str]:
        async with self._translated("list", kind):
            found = self.client.list(_resource(kind), fields=dict(field_selector))
            items = [_plain(obj) async for obj in found]
            return items, str(found.resourceVersion)

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject:
        async with self._translated("create", kind, body["metadata"].get("name")):
            return _plain(await self.client.create(_resource(kind)(body)))

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject:
        async with self._translated("replace", kind, body["metadata"].get("name")):
            return _plain(await self.client.replace(_resource(kind)(body)))

    async def apply_status(self, kind: Kind, body: JsonObject) -> JsonObject:
        metadata = body["metadata"]
        async with self._translated("apply", kind, f"{metadata.get('name')}/status"):
            return _plain(
                await self.client.patch(
                    _resource(kind).Status,
                    metadata["name"],
                    body,
                    namespace=metadata.get("namespace"),
                    patch_type=PatchType.APPLY,
                    field_manager=FIELD_MANAGER,
                    force=True,
                )
            )

    async def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        async with self._translated("delete", kind, name):
            await self.client.delete(_resource(kind), name, namespace=namespace)

    async def watch(
        self, kind: Kind, field_selector: Mapping[str, str], start: WatchStart | None = None
    ) -> AsyncIterator[tuple[str, JsonObject]]:
        # lightkube resumes a stream the server ended from the last version it saw, and raises
        # on an error: what the seam promises.
        events = self.client.watch(
            _resource(kind), fields=dict(field_selector), resource_version=start
        )
        async with self._translated("watch", kind, stream=True):
            async for event, obj in events:
                yield event, _plain(obj)

    async def close(self) -> None:
        await self.client.close()


def connect(kubeconfig: Path | None) -> LightkubeApi:
    """A client from a kubeconfig file (a host process), else the pod's service account;
    KubeconfigError naming the file and what is wrong with it when neither gives one."""
    make: Callable[[], KubeConfig]
    if kubeconfig is not None:
        content, server = load_kubeconfig(kubeconfig)
        content = _no_trust_store_for_http(content, server)
        where, code = str(kubeconfig), EXIT_USAGE
        make = functools.partial(KubeConfig.from_dict, content, fname=kubeconfig)
    else:
        server, where, code = check_service_account(), "the pod's service account", EXIT_ENVIRONMENT
        make = KubeConfig.from_service_account
    try:
        timeout = httpx2.Timeout(REQUEST_TIMEOUT)
        client = AsyncClient(make(), field_manager=FIELD_MANAGER, timeout=timeout)
    except Exception as err:  # the library's many kinds: a CA file missing, a bad field type
        raise KubeconfigError(
            f"{where}: no client for {server} can be made from it: {_first_line(err)}", code=code
        ) from err
    return LightkubeApi(client, server)


def _no_trust_store_for_http(content: dict[str, Any], server: str) -> dict[str, Any]:
    """``content`` with its current cluster's TLS verification off when its server is plain
    ``http://`` and names no CA: the client never handshakes with it, yet it would load the
    system's whole trust store into a TLS context it never uses, ~4 MiB resident. The caller's
    dict is not changed; an https server, or one with a CA, keeps its settings."""
    if not server.lower().startswith("http://"):
        return content
    context = next(
        c["context"] for c in content["contexts"] if c.get("name") == content["current-context"]
    )
    clusters = [dict(c) for c in content["clusters"]]
    for entry in clusters:
        cluster = entry.get("cluster")
        if entry.get("name") == context.get("cluster") and isinstance(cluster, Mapping):
            if cluster.get("certificate-authority") or cluster.get("certificate-authority-data"):
                return content
            entry["cluster"] = {**cluster, "insecure-skip-tls-verify": True}
    return {**content, "clusters": clusters}


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


@contextlib.asynccontextmanager
async def _translated(
    verb: str, plural: str, name: str | None, server: str, *, stream: bool = False
) -> AsyncIterator[None]:
    """Turns lightkube's and httpx's errors into ``errors.ApiError`` (our refusal type), naming
    the call and the server; on a watch ``stream``, so does a line that is not a watch event
    (a proxy's garbage, a cut)."""
    what = f"{verb} {plural}" + (f"/{name}" if name else "")
    at = f"{what} at {server}" if server else what
    asked: dict[str, Any] = {"verb": verb, "resource": plural}
    try:
        yield
    except (ValueError, KeyError, TypeError) as err:
        if not stream:
            raise
        raise ApiError(f"{at}: undecodable event ({type(err).__name__}: {err})", **asked) from err
    except LightkubeApiError as err:
        status = err.status
        response = getattr(err, "response", None)  # none for a watch's ERROR event
        code = int(status.code or (response.status_code if response is not None else 0))
        said = f"HTTP {code or '?'} {status.reason or ''}".rstrip()
        if status.message:
            said = f"{status.message} ({said})"
        raise ApiError(f"{at}: {said}", status=code, reason=str(status.reason or ""),
                       **asked) from err  # fmt: skip
    except httpx2.HTTPStatusError as err:  # an answer that is no Status object (a proxy's page)
        code = err.response.status_code
        raise ApiError(f"{at}: HTTP {code} {err.response.reason_phrase}".rstrip(), status=code,
                       **asked) from err  # fmt: skip
    except httpx2.HTTPError as err:
        raise ApiError(
            f"{at}: API server not reachable ({err})", reason=UNREACHABLE, **asked
        ) from err
