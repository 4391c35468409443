"""The two calls ``mode: auto`` adds to the API client, and only it: whether the API server
serves a group version (discovery), and a JSON merge patch (its Node's label and annotation).

A subclass of ``RestApi`` in a module of its own, so the client the DRA driver and kubectl use
stays as it is; the requests go through the same bounded, authorised, translated ``_call``.
"""

from __future__ import annotations

from urllib.parse import quote

from kae_deviceplugin.apiserver.rest_api import FIELD_MANAGER, RestApi
from kae_deviceplugin.apiserver.seam import JsonObject, Kind
from kae_deviceplugin.errors import ApiError

MERGE_PATCH = "application/merge-patch+json"


class NodeApi(RestApi):
    """``RestApi`` with ``serves`` and ``merge_patch``."""

    @classmethod
    def of(cls, api: RestApi) -> NodeApi:
        """The same API server and credentials (``api`` itself is not used after)."""
        return cls(api.target)

    async def serves(self, group: str, version: str) -> bool:
        """Whether the API server serves ``group/version`` (its discovery document, ``GET
        /apis/<group>/<version>``, answers; a 404 says it does not). Other refusals raise."""
        kind = Kind(group, version, "APIResourceList", "apis", namespaced=False)
        path = "/".join([self.target.prefix, "apis", group, version])
        try:
            await self._call("discover", kind, f"{group}/{version}", "GET", path)
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True

    async def merge_patch(self, kind: Kind, name: str, body: JsonObject) -> JsonObject:
        """A JSON merge patch (RFC 7386) of ``body`` onto the cluster-scoped object ``name``:
        what it does not name is left as it is (a Node's labels that the kubelet and others
        own); a key set to None is removed."""
        base = (
            [self.target.prefix, "apis", kind.group] if kind.group else [self.target.prefix, "api"]
        )
        path = "/".join([*base, kind.version, kind.plural, quote(name, safe="")])
        query = {"fieldManager": FIELD_MANAGER}
        patched: JsonObject = await self._call(
            "patch", kind, name, "PATCH", path, query=query, body=body, content_type=MERGE_PATCH
        )
        return patched
