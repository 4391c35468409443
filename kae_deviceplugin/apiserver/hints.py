"""What to do about an API server's refusal, in one line, from the error alone (pure).

The driver's identity needs the verbs of one table, ``DRIVER_RULES``: the chart's ClusterRole
grants exactly these (a test holds the two equal), ``doctor`` names them in its fix, and a
``serve`` that meets a 403 names them in its log. A 404 on a list, a watch or a create is no
missing object but a missing API: on the ``resource.k8s.io`` kinds that is a cluster older than
DRA's v1. Every request the daemon sends passes ``HintedApi``, so each log line and ``/readyz``
entry that carries such an error carries its hint too, whichever part of the driver met it.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping

from kae_deviceplugin.apiserver.seam import ApiServer, JsonObject, Kind, WatchStart
from kae_deviceplugin.errors import UNREACHABLE, ApiError, KubeconfigError

# What the driver's identity may do: (API group, resource, verbs), as the chart's ClusterRole
# grants it and deploy/dra/README.md lists it.
DRIVER_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "resource.k8s.io",
        "resourceslices",
        ("get", "list", "watch", "create", "update", "patch", "delete"),
    ),
    ("resource.k8s.io", "resourceclaims", ("get",)),
    ("resource.k8s.io", "resourceclaims/status", ("patch",)),
    ("", "nodes", ("get",)),
)
DRA_RESOURCES = frozenset(resource for group, resource, _ in DRIVER_RULES if group)
DRA_VERSION = "resource.k8s.io/v1"
COLLECTION_VERBS = frozenset({"list", "watch", "create"})  # a 404 here: no such resource


def _rules_text() -> str:
    def group(name: str) -> str:
        return name or "the core group"

    return "; ".join(
        f"in {group(g)}, {resource} {', '.join(verbs)}" for g, resource, verbs in DRIVER_RULES
    )


RBAC_FIX = (
    "the identity (the kubeconfig's user, in a pod its service account) needs the driver's "
    f"ClusterRole: {_rules_text()} (the chart's <release>-dra; deploy/dra/README.md)"
)
NO_DRA_FIX = (
    f"the API server does not serve {DRA_VERSION}: DRA needs Kubernetes 1.34+ "
    "(keep this node in device-plugin mode on an older cluster)"
)
UNAUTHORIZED_FIX = (
    "the API server does not accept the credentials: an expired or revoked token, or the "
    "kubeconfig of another cluster"
)
UNREACHABLE_FIX = "is the API server reachable from here (its address, a proxy, a firewall)?"
SERVER_FAILED_FIX = "the API server failed: its log says why"
BY_STATUS = {401: UNAUTHORIZED_FIX, 403: RBAC_FIX}


def hint(err: ApiError) -> str | None:
    """The fix for ``err``, when its status (and, for a 404, what was asked) tells one."""
    if isinstance(err, KubeconfigError):
        return None  # its message is the whole story: the file and what is wrong with it
    if err.status == 404:
        missing_api = err.verb in COLLECTION_VERBS and err.resource in DRA_RESOURCES
        return NO_DRA_FIX if missing_api else None
    if err.status == 0:
        return UNREACHABLE_FIX if err.reason == UNREACHABLE else None
    return BY_STATUS.get(err.status, SERVER_FAILED_FIX if err.status >= 500 else None)


def with_hint(err: ApiError) -> str:
    """``err``'s message, and its hint after a ``;`` where there is one."""
    found = hint(err)
    return str(err) if found is None else f"{err}; {found}"


def hinted(err: ApiError) -> ApiError:
    """``err`` with its hint in the message; status, reason and request kept for callers."""
    found = hint(err)
    if found is None or str(err).endswith(found):
        return err
    return ApiError(
        with_hint(err),
        status=err.status,
        reason=err.reason,
        verb=err.verb,
        resource=err.resource,
    )


class HintedApi:
    """Wraps ``api``: every ApiError it raises carries its hint (see the module's docstring)."""

    def __init__(self, api: ApiServer) -> None:
        self.api = api

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        try:
            return await self.api.get(kind, name, namespace)
        except ApiError as err:
            raise hinted(err) from err

    async def list(self, kind: Kind, field_selector: Mapping[str, str]) -> list[JsonObject]:
        try:
            return await self.api.list(kind, field_selector)
        except ApiError as err:
            raise hinted(err) from err

    async def list_versioned(
        self, kind: Kind, field_selector: Mapping[str, str]
    ) -> tuple[builtins.list[JsonObject], str]:
        try:
            return await self.api.list_versioned(kind, field_selector)
        except ApiError as err:
            raise hinted(err) from err

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject:
        try:
            return await self.api.create(kind, body)
        except ApiError as err:
            raise hinted(err) from err

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject:
        try:
            return await self.api.replace(kind, body)
        except ApiError as err:
            raise hinted(err) from err

    async def apply_status(self, kind: Kind, body: JsonObject) -> JsonObject:
        try:
            return await self.api.apply_status(kind, body)
        except ApiError as err:
            raise hinted(err) from err

    async def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        try:
            await self.api.delete(kind, name, namespace)
        except ApiError as err:
            raise hinted(err) from err

    async def watch(
        self, kind: Kind, field_selector: Mapping[str, str], start: WatchStart | None = None
    ) -> AsyncIterator[tuple[str, JsonObject]]:
        try:
            async for event in self.api.watch(kind, field_selector, start):
                yield event
        except ApiError as err:
            raise hinted(err) from err

    async def close(self) -> None:
        await self.api.close()
