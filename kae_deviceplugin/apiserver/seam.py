"""What the DRA front end asks of the API server, as a protocol over plain JSON objects.

The front end builds and reads objects as the API's JSON (dicts), so it is tested against a
fake server with no client library, and the library behind ``ApiServer`` can be swapped without
touching it. Each kind is named by its API path parts, as the REST API spells them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

JsonObject = dict[str, Any]


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

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject: ...

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject: ...

    async def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None: ...

    def watch(
        self, kind: Kind, field_selector: Mapping[str, str]
    ) -> AsyncIterator[tuple[str, JsonObject]]:
        """(event type, object) pairs: ADDED, MODIFIED, DELETED; ends when the server ends it."""
        ...

    async def close(self) -> None: ...
