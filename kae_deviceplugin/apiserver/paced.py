"""An ``ApiServer`` that spends one token of a bucket per request, whatever asks.

The driver's controllers (the slice publisher, its watch, the Node lookup, the stale-claim
sweep) each pace their own retries; this is the floor under all of them together: one node
never sends the API server more than ``RATE`` requests a second on average per lane, so no
error path, foreseen or not, becomes a storm.

Three lanes, each a bucket of its own over one client and one request count: the pool's
(slices, their watch, the Node), the claims' (the kubelet's claim reads, the stale-claim sweep)
and the claims' status (written after each call). A burst of claims, which the kubelet sends
whenever many pods start at once, so never delays a device's health reaching its slice, and the
status written after each prepare never delays the next prepare's claim read. No lane goes
into debt: a request that would wait past ``MAX_WAIT`` is refused at once with
``RequestBudgetSpent`` (the kubelet asks again), and one whose caller gave up while it waited
gives its token back.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Mapping

from kae_deviceplugin.apiserver.rest_api import RestApi
from kae_deviceplugin.apiserver.seam import ApiServer, JsonObject, Kind, WatchStart
from kae_deviceplugin.core.backoff import TokenBucket
from kae_deviceplugin.errors import RequestBudgetSpent

log = logging.getLogger(__name__)

RATE = 5.0  # requests a second, on average, per lane
BURST = 20.0  # at once: a start-up (Node, list, a pool's slices, a prepare's claims)
MAX_WAIT = 10.0  # seconds a request may queue for its token; the kubelet's call has 45 s
# Requests of one lane under way at once (watches aside); the rest wait for one to end. Each is
# on a connection of its own (HTTP/1.1): without the cap, 50 claims prepared at once opened up
# to 46 new connections, each a TLS handshake on the one event loop, and on the real cluster
# each claim read waited 100-300 ms instead of 2-3 ms on a kept-alive connection. Per lane, so
# claim reads a server holds never keep a slice write from a connection.
IN_FLIGHT = 4


def bucket() -> TokenBucket:
    """A lane's bucket as the daemon runs it."""
    return TokenBucket(RATE, BURST, MAX_WAIT)


class PacedApi:
    """Wraps ``api``; ``requests`` counts what was sent, by verb, ``refused`` what was not."""

    def __init__(
        self,
        api: ApiServer,
        bucket_: TokenBucket | None = None,
        *,
        lane: str = "pool",
        requests: Counter[str] | None = None,
        refused: Counter[str] | None = None,
    ) -> None:
        self.api = api
        self.bucket = bucket_ or bucket()
        self.lane_name = lane
        self.requests: Counter[str] = Counter() if requests is None else requests
        self.refused: Counter[str] = Counter() if refused is None else refused
        self._refusing = False  # to log the start of a refusing spell once, not every request
        self._in_flight = asyncio.Semaphore(IN_FLIGHT)
        client = _client_under(api)
        if client is not None and client.before_request is None:
            # A call's further requests (a list's pages, a watch asked again, a repeat after a
            # 401) pay too, in the lane of the first PacedApi over the client: the pool's
            # (slices and their watch), as ``lane`` makes the others.
            client.before_request = self._further

    def lane(self, name: str, bucket_: TokenBucket | None = None) -> PacedApi:
        """The same client and counts with a bucket of its own."""
        return PacedApi(self.api, bucket_, lane=name, requests=self.requests, refused=self.refused)

    async def _further(self, verb: str, kind: Kind) -> None:
        await self._token(verb)

    async def _token(self, verb: str) -> None:
        loop = asyncio.get_running_loop()
        wait = self.bucket.reserve(loop.time())
        if wait is None:
            self.refused[verb] += 1
            limit = self.bucket.max_wait
            if not self._refusing:
                self._refusing = True
                log.warning(
                    "API requests for %s refused: more than %g s of them queued at %g a "
                    "second; they are asked again later",
                    self.lane_name, limit, self.bucket.rate,
                )  # fmt: skip
            raise RequestBudgetSpent(
                f"not sent: this node's API requests for {self.lane_name} are queued "
                f"{limit:g} s deep ({self.bucket.rate:g} a second); ask again",
                verb=verb,
                reason="TooManyRequests",
            )
        if self._refusing:
            self._refusing = False
            log.info("API requests for %s go out again", self.lane_name)
        if wait > 0:
            try:
                await asyncio.sleep(wait)
            except asyncio.CancelledError:  # its caller gave up: the token was never used
                self.bucket.refund(loop.time())
                raise
        self.requests[verb] += 1

    @contextlib.asynccontextmanager
    async def _sending(self, verb: str) -> AsyncIterator[None]:
        """A token of the lane, then one of its IN_FLIGHT places while the request is out."""
        await self._token(verb)
        async with self._in_flight:
            yield

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        async with self._sending("get"):
            return await self.api.get(kind, name, namespace)

    async def list(self, kind: Kind, field_selector: Mapping[str, str]) -> list[JsonObject]:
        async with self._sending("list"):
            return await self.api.list(kind, field_selector)

    async def list_versioned(
        self, kind: Kind, field_selector: Mapping[str, str]
    ) -> tuple[builtins.list[JsonObject], str]:
        async with self._sending("list"):
            return await self.api.list_versioned(kind, field_selector)

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject:
        async with self._sending("create"):
            return await self.api.create(kind, body)

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject:
        async with self._sending("update"):
            return await self.api.replace(kind, body)

    async def apply_status(self, kind: Kind, body: JsonObject) -> JsonObject:
        async with self._sending("patch"):
            return await self.api.apply_status(kind, body)

    async def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        async with self._sending("delete"):
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
