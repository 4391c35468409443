"""What the HTTP test API server does wrong on purpose, and its record of every request.

Set from the test thread at any time, read by the server's loop per request: both sides take
the server's one lock. A refusal answers a verb on a resource with a Status of the given code,
for every request or for the next ``times`` of them; dropped fields are removed from what a
write stores, as a server whose feature gate is off does. Every request is recorded when it
arrives, with a monotonic timestamp, so a test can count what a client asked in a time window.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.support.apiserver_store import StatusError

VERBS = ("list", "watch", "get", "create", "update", "delete")
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class Refusal:
    """Answer ``verb`` on ``resource`` with ``code``; ``left`` None refuses every request."""

    verb: str
    resource: str
    code: int
    left: int | None
    retry_after: int | None
    message: str


@dataclass
class RequestRecord:
    """One request as it arrived; ``code`` is the status answered, once it is known."""

    verb: str
    resource: str
    name: str | None
    at: float  # time.monotonic() at arrival
    code: int | None = None


@dataclass
class Faults:
    """Refusals, dropped fields and the request log, under the server's ``lock``."""

    lock: threading.Condition = field(default_factory=threading.Condition)
    refusals: list[Refusal] = field(default_factory=list)
    dropped: dict[str, tuple[str, ...]] = field(default_factory=dict)
    log: list[RequestRecord] = field(default_factory=list)
    watches_end_at_once: bool = False  # each watch answered and ended with nothing in it

    def refuse(
        self,
        verb: str,
        resource: str = "resourceslices",
        code: int = 403,
        *,
        times: int | None = None,
        retry_after: int | None = None,
    ) -> None:
        """Refuse ``verb`` (list, watch, get, create, update, delete) on ``resource`` with a
        Status of ``code``: every request, or only the next ``times``. A 429 carries
        ``Retry-After: retry_after`` (1 s unless given)."""
        if verb not in VERBS:
            raise ValueError(f"verb {verb!r} is none of {VERBS}")
        if code == 429 and retry_after is None:
            retry_after = 1
        reason = REASONS.get(code, "InternalError")
        message = f"{verb} {resource} refused by the test API server ({reason})"
        with self.lock:
            self.refusals.append(Refusal(verb, resource, code, times, retry_after, message))

    def allow(self, verb: str | None = None, resource: str | None = None) -> None:
        """Lift the refusals of ``verb`` on ``resource`` (None: of every verb, every resource)."""
        with self.lock:
            self.refusals = [
                r
                for r in self.refusals
                if not ((verb in (None, r.verb)) and (resource in (None, r.resource)))
            ]

    def refusal_for(self, verb: str, resource: str) -> StatusError | None:
        """The refusal this request gets, if any; counts it against a refusal's ``times``."""
        with self.lock:
            for refusal in self.refusals:
                if refusal.verb != verb or refusal.resource != resource:
                    continue
                if refusal.left is not None:
                    refusal.left -= 1
                    if refusal.left <= 0:
                        self.refusals.remove(refusal)
                reason = REASONS.get(refusal.code, "InternalError")
                return StatusError(
                    refusal.code, reason, refusal.message, retry_after=refusal.retry_after
                )
            return None

    def drop_fields(self, *paths: str, resource: str = "resourceslices") -> None:
        """Writes of ``resource`` keep none of the dotted ``paths`` (``spec.devices.taints``);
        no paths: keep everything again."""
        with self.lock:
            self.dropped[resource] = tuple(paths)

    def dropped_for(self, resource: str) -> tuple[str, ...]:
        with self.lock:
            return self.dropped.get(resource, ())

    def record(self, verb: str, resource: str, name: str | None) -> RequestRecord:
        with self.lock:
            entry = RequestRecord(verb, resource, name, time.monotonic())
            self.log.append(entry)
            self.lock.notify_all()
            return entry

    def answered(self, entry: RequestRecord, code: int) -> None:
        with self.lock:
            entry.code = code
            self.lock.notify_all()

    def requests(
        self,
        verbs: str | Iterable[str] | None = None,
        resource: str | None = "resourceslices",
        *,
        since: float = float("-inf"),
        until: float = float("inf"),
    ) -> list[RequestRecord]:
        """The requests of ``verbs`` (one, several or None for all) on ``resource`` (None: any)
        that arrived between the monotonic times ``since`` and ``until``."""
        wanted = {verbs} if isinstance(verbs, str) else None if verbs is None else set(verbs)
        with self.lock:
            return [
                r
                for r in self.log
                if (wanted is None or r.verb in wanted)
                and resource in (None, r.resource)
                and since <= r.at <= until
            ]

    def count(
        self,
        verbs: str | Iterable[str] | None = None,
        resource: str | None = "resourceslices",
        *,
        since: float = float("-inf"),
        until: float = float("inf"),
    ) -> int:
        """How many ``requests(...)`` there were."""
        return len(self.requests(verbs, resource, since=since, until=until))
