"""An ``ApiServer`` that spends one token of a shared bucket per request, whatever asks.

The driver's controllers (the slice publisher, its watch, the Node lookup, the stale-claim
sweep) each pace their own retries; this is the floor under all of them together: one node
never sends the API server more than ``rate`` requests a second on average, so no error path,
foreseen or not, becomes a storm. The kubelet's claim reads go through it too: a burst of
prepares (ten at once) stays within the bucket's burst.
"""

from __future__ import annotations

import asyncio
import builtins
from collections import Counter
from collections.abc import AsyncIterator, Mapping

from kae_deviceplugin.apiserver.rest_api import RestApi
from kae_deviceplugin.apiserver.seam import ApiServer, JsonObject, Kind, WatchStart
from kae_deviceplugin.core.backoff import TokenBucket

RATE = 5.0  # requests a second, on average
BURST = 20.0  # at once: a start-up (Node, list, a pool's slices, a prepare's claims)


class PacedApi:
    """Wraps ``api``; ``requests`` counts what was sent, by verb."""

    def __init__(self, api: ApiServer, bucket: TokenBucket | None = None) -> None:
        self.api = api
        self.bucket = bucket or TokenBucket(RATE, BURST)
        self.requests: Counter[str] = Counter()
        client = _client_under(api)
        if client is not None:  # a call's further requests (pages, re-watches) pay too
            client.before_request = self._further

    async def _further(self, verb: str, kind: Kind) -> None:
        await self._token(verb)

    async def _token(self, verb: str) -> None:
        self.requests[verb] += 1
        wait = self.bucket.reserve(asyncio.get_running_loop().time())
        if wait > 0:
            await asyncio.sleep(wait)

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        await self._token("get")
        return await self.api.get(kind, name, namespace)

    async def list(self, kind: Kind, field_selector: Mapping[str, str]) -> list[JsonObject]:
        await self._token("list")
        return await self.api.list(kind, field_selector)

    async def list_versioned(
        self, kind: Kind, field_selector: Mapping[str, str]
    ) -> tuple[builtins.list[JsonObject], str]:
        await self._token("list")
        return await self.api.list_versioned(kind, field_selector)

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject:
        await self._token("create")
        return await self.api.create(kind, body)

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject:
        await self._token("update")
        return await self.api.replace(kind, body)

    async def apply_status(self, kind: Kind, body: JsonObject) -> JsonObject:
        await self._token("patch")
        return await self.api.apply_status(kind, body)

    async def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        await self._token("delete")
        await self.api.delete(kind, name, namespace)

    async def watch(
        self, kind: Kind, field_selector: Mapping[str, str], start: WatchStart | None = None
    ) -> AsyncIterator[tuple[str, JsonObject]]:
        await self._token("watch")
        async for event in self.api.watch(kind, field_selector, start):
            yield event

    async def close(self) -> None:
        await self.api.close()


def _client_under(api: object) -> RestApi | None:
    """The ``RestApi`` under ``api`` and its wrappers (``HintedApi``: each holds ``api``)."""
    while not isinstance(api, RestApi):
        api = getattr(api, "api", None)
        if api is None:
            return None
    return api
