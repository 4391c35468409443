"""What the DRA front end asks of the API server, as a protocol over plain JSON objects.

The front end builds and reads objects as the API's JSON (dicts), so it is tested against a
fake server with no client library, and the library behind ``ApiServer`` can be swapped without
touching it. Each kind is named by its API path parts, as the REST API spells them.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

JsonObject = dict[str, Any]
WatchStart = str  # a resourceVersion, as a list returned it


@dataclass(frozen=True, slots=True)
class Kind:
    """An API resource: its group ("" for the core group), version and plural name."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCE_SLICES = Kind("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", namespaced=False)
RESOURCE_CLAIMS = Kind("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", namespaced=True)
DEVICE_CLASSES = Kind("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", namespaced=False)
NODES = Kind("", "v1", "Node", "nodes", namespaced=False)


class ApiServer(Protocol):
    """The calls a kubelet plugin's controller needs; errors are ``errors.ApiError``."""

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject: ...

    async def list(self, kind: Kind, field_selector: Mapping[str, str]) -> list[JsonObject]: ...

    async def list_versioned(
        self, kind: Kind, field_selector: Mapping[str, str]
    ) -> tuple[builtins.list[JsonObject], str]:
        """The objects and the list's resourceVersion, to start a watch from without a gap."""
        ...

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject: ...

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject: ...

    async def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None: ...

    async def apply_status(self, kind: Kind, body: JsonObject) -> JsonObject:
        """Server-side apply of ``body``'s ``status`` to the object's status subresource, as
        this client's field manager (forced): fields other managers own are left alone."""
        ...

    def watch(
        self, kind: Kind, field_selector: Mapping[str, str], start: WatchStart | None = None
    ) -> AsyncIterator[tuple[str, JsonObject]]:
        """(event type, object) pairs: ADDED, MODIFIED, DELETED, from ``start`` (a list's
        resourceVersion) or from now. A stream the server ends cleanly is resumed from the last
        event seen; an error (410 Gone: that version is too old; a broken or undecodable
        stream) ends the iteration with ``ApiError``, and the caller lists again."""
        ...

    async def close(self) -> None: ...
