"""What a reader of the whole cluster asks of the API server (the kubectl plugin's seam).

The daemon's ``seam.ApiServer`` is one node's controller: it lists in the client's own
namespace and writes. A person's ``kubectl kae`` reads every namespace and writes nothing, with
the person's credentials, and must name the server it could not read. Objects cross as plain
JSON dicts, as in the daemon's seam, so the plugin is tested without a client library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from kae_deviceplugin.apiserver.seam import (
    DEVICE_CLASSES,
    NODES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    JsonObject,
    Kind,
)

PODS = Kind("", "v1", "Pod", "pods", namespaced=True)
RESOURCE_CLAIM_TEMPLATES = Kind(
    "resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates", namespaced=True
)

__all__ = [
    "DEVICE_CLASSES",
    "NODES",
    "PODS",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_SLICES",
    "ClusterReads",
    "JsonObject",
    "Kind",
]


class ClusterReads(Protocol):
    """Read-only calls over every namespace; errors are ``errors.ApiError``."""

    @property
    def server(self) -> str:
        """The API server's URL, for a message that says which cluster could not be read."""
        ...

    @property
    def namespace(self) -> str:
        """The context's namespace (``default`` when it names none), as kubectl defaults to."""
        ...

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject: ...

    async def list_all(
        self, kind: Kind, field_selector: Mapping[str, str] | None = None
    ) -> list[JsonObject]:
        """Every object of ``kind`` (in every namespace, for a namespaced kind)."""
        ...

    async def close(self) -> None: ...
