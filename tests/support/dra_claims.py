"""ResourceClaims as the API server returns them, and a store that answers a driver's GETs.

Written from the resource.k8s.io/v1 API (``ResourceClaim.status.allocation.devices.results``),
not from the driver: the driver under test must make sense of these objects on its own. The
store stands in for the API server's GET of one claim, so tests can delete, re-create or
withhold claims the way a cluster does.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DRIVER = "kae.openfuyao.com"  # restated here: the oracle does not import the driver


@dataclass(frozen=True)
class Result:
    """One allocation result: a request of the claim got a device of a pool."""

    request: str
    device: str
    pool: str
    driver: str = DRIVER
    share_id: str | None = None
    consumed_queues: str | None = None  # consumedCapacity.queues, as the API writes a quantity


def claim_object(
    namespace: str, name: str, results: Sequence[Result] | None, *, uid: str | None = None
) -> dict[str, Any]:
    """A ResourceClaim; ``results`` None leaves it unallocated."""
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid or str(uuid.uuid4())},
        "spec": {"devices": {"requests": []}},
        "status": {},
    }
    requests = sorted({r.request.partition("/")[0] for r in results or ()})
    claim["spec"]["devices"]["requests"] = [
        {"name": r, "exactly": {"deviceClassName": "kae"}} for r in requests
    ]
    if results is not None:
        claim["status"]["allocation"] = {
            "devices": {"results": [_result(r) for r in results]},
            "nodeSelector": {"nodeSelectorTerms": []},
        }
    return claim


def _result(result: Result) -> dict[str, Any]:
    rendered: dict[str, Any] = {
        "request": result.request,
        "driver": result.driver,
        "pool": result.pool,
        "device": result.device,
    }
    if result.share_id is not None:
        rendered["shareID"] = result.share_id
    if result.consumed_queues is not None:
        rendered["consumedCapacity"] = {"queues": result.consumed_queues}
    return rendered


class ClaimNotFound(LookupError):
    """The API server's 404 for a claim."""


class ClaimStore:
    """The claims of a cluster, answering ``get(namespace, name)`` as the API server would."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads: list[tuple[str, str]] = []
        self.hang = False  # True: GETs never answer (an API server that stopped responding)

    def add(self, claim: dict[str, Any]) -> dict[str, Any]:
        meta = claim["metadata"]
        self.claims[(meta["namespace"], meta["name"])] = claim
        return claim

    def delete(self, namespace: str, name: str) -> None:
        self.claims.pop((namespace, name), None)

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads.append((namespace, name))
        if self.hang:
            await asyncio.Event().wait()  # never answers; the caller's deadline ends it
        found = self.claims.get((namespace, name))
        if found is None:
            raise ClaimNotFound(f'resourceclaims.resource.k8s.io "{name}" not found')
        return found
