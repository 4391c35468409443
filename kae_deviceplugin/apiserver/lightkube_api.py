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
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx2
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError as LightkubeApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.types import PatchType

from kae_deviceplugin.apiserver.seam import JsonObject, Kind, WatchStart
from kae_deviceplugin.errors import ApiError

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
    """The calls of ``seam.ApiServer`` on one lightkube ``AsyncClient``."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        async with _translated(f"get {kind.plural}/{name}"):
            return _plain(await self.client.get(_resource(kind), name, namespace=namespace))

    async def list(self, kind: Kind, field_selector: Mapping[str, str]) -> list[JsonObject]:
        async with _translated(f"list {kind.plural}"):
            found = self.client.list(_resource(kind), fields=dict(field_selector))
            return [_plain(obj) async for obj in found]

    async def list_versioned(
        self, kind: Kind, field_selector: Mapping[str, str]
    ) -> tuple[builtins.list[JsonObject], str]:
        async with _translated(f"list {kind.plural}"):
            found = self.client.list(_resource(kind), fields=dict(field_selector))
            items = [_plain(obj) async for obj in found]
            return items, str(found.resourceVersion)

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject:
        async with _translated(f"create {kind.plural}/{body['metadata'].get('name')}"):
            return _plain(await self.client.create(_resource(kind)(body)))

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject:
        async with _translated(f"replace {kind.plural}/{body['metadata'].get('name')}"):
            return _plain(await self.client.replace(_resource(kind)(body)))

    async def apply_status(self, kind: Kind, body: JsonObject) -> JsonObject:
        metadata = body["metadata"]
        async with _translated(f"apply {kind.plural}/{metadata.get('name')}/status"):
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
        async with _translated(f"delete {kind.plural}/{name}"):
            await self.client.delete(_resource(kind), name, namespace=namespace)

    async def watch(
        self, kind: Kind, field_selector: Mapping[str, str], start: WatchStart | None = None
    ) -> AsyncIterator[tuple[str, JsonObject]]:
        # lightkube resumes a stream the server ended from the last version it saw, and raises
        # on an error: what the seam promises.
        events = self.client.watch(
            _resource(kind), fields=dict(field_selector), resource_version=start
        )
        async with _translated(f"watch {kind.plural}", stream=True):
            async for event, obj in events:
                yield event, _plain(obj)

    async def close(self) -> None:
        await self.client.close()


def connect(kubeconfig: Path | None) -> LightkubeApi:
    """A client from a kubeconfig file (a host process), else the pod's service account."""
    try:
        config = (
            KubeConfig.from_file(kubeconfig)
            if kubeconfig is not None
            else KubeConfig.from_service_account()
        )
    except Exception as err:  # lightkube raises several kinds for a missing or bad config
        where = kubeconfig or "the in-cluster service account"
        raise ApiError(f"cannot read {where}: {err}") from err
    client = AsyncClient(
        config, field_manager=FIELD_MANAGER, timeout=httpx2.Timeout(REQUEST_TIMEOUT)
    )
    return LightkubeApi(client)


@contextlib.asynccontextmanager
async def _translated(what: str, *, stream: bool = False) -> AsyncIterator[None]:
    """Turns lightkube's and httpx's errors into ``errors.ApiError`` (our refusal type); on a
    watch ``stream``, so does a line that is not a watch event (a proxy's garbage, a cut)."""
    try:
        yield
    except (ValueError, KeyError, TypeError) as err:
        if not stream:
            raise
        raise ApiError(f"{what}: undecodable event ({type(err).__name__}: {err})") from err
    except LightkubeApiError as err:
        status = err.status
        said = status.message or f"HTTP {status.code or '?'} {status.reason or ''}".rstrip()
        raise ApiError(
            f"{what}: {said}",
            status=int(status.code or 0),
            reason=str(status.reason or ""),
        ) from err
    except httpx2.HTTPError as err:
        raise ApiError(f"{what}: API server not reachable ({err})") from err
