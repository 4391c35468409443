"""The objects of the HTTP test API server, and its watches, with the real server's semantics
that a controller depends on.

Every write takes the next resourceVersion (one counter for the whole store, as etcd's revision
is) and is kept in a history, so a watch resumed from a version replays what happened since,
the way lightkube resumes a watch whose stream ended cleanly. A watch from no version (or "0")
starts with a synthetic ADDED per existing object, as the real server's does. A version older
than the history kept (``compact``) is answered with an ERROR event holding a 410 Gone Status.

Thread-safe: the test thread seeds, wipes and reads while the server's loop serves; both take
``lock``. Watchers get their events through a ``deliver`` callable that must itself be safe to
call from any thread (the server hands the event to its loop).
"""

from __future__ import annotations

import builtins
import copy
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.support.apiserver_fields import JsonObject, at, drop, now_rfc3339, stamp_taints

Ending = Literal["clean", "gone", "garbage"]
Key = tuple[str, str | None, str]  # (plural, namespace or None, name)


class StatusError(Exception):
    """A refusal the server answers with a Kubernetes Status object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        retry_after: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after  # seconds, sent as Retry-After (429)
        self.details = details  # the Status's details (a missing object's name and kind)


def not_found(plural: str, name: str) -> StatusError:
    """The API server's 404 for an object that does not exist: its Status names the object
    (``details.name``, and ``kind``: the plural; the HTTP layer adds the group)."""
    return StatusError(
        404, "NotFound", f'{plural} "{name}" not found', details={"name": name, "kind": plural}
    )


@dataclass(frozen=True)
class Event:
    """One watch event: ADDED, MODIFIED, DELETED or BOOKMARK, and the object."""

    type: str
    object: JsonObject


@dataclass(frozen=True)
class End:
    """The end of a watch stream: clean, after a 410 ERROR event, or after a garbage line."""

    how: Ending


WatchItem = Event | End


@dataclass(eq=False)
class Watcher:
    """An open watch: what it selects and how its events reach its stream."""

    plural: str
    namespace: str | None
    selector: Mapping[str, str]
    deliver: Callable[[WatchItem], None]

    def selects(self, plural: str, obj: JsonObject) -> bool:
        if plural != self.plural:
            return False
        if self.namespace is not None and at(obj, "metadata.namespace") != self.namespace:
            return False
        return all(at(obj, path) == value for path, value in self.selector.items())


def gone_status(message: str) -> JsonObject:
    """The Status of a watch whose resourceVersion the server no longer has."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Expired",
        "code": 410,
    }


@dataclass
class ObjectStore:
    """Objects by (plural, namespace, name), a history of changes, and the open watches."""

    lock: threading.Condition = field(default_factory=threading.Condition)
    objects: dict[Key, JsonObject] = field(default_factory=dict)
    version: int = 0
    oldest: int = 0  # a watch from a version below this one is answered 410 Gone
    history: list[tuple[str, Event]] = field(default_factory=list)  # (plural, event)
    watchers: list[Watcher] = field(default_factory=list)

    # -- reads --------------------------------------------------------------------------------

    def get(self, plural: str, namespace: str | None, name: str) -> JsonObject:
        with self.lock:
            found = self.objects.get((plural, namespace, name))
            if found is None:
                raise not_found(plural, name)
            return copy.deepcopy(found)

    def list(
        self, plural: str, namespace: str | None, selector: Mapping[str, str]
    ) -> tuple[builtins.list[JsonObject], str]:
        """The matching objects (sorted by namespace and name) and the list's resourceVersion."""
        probe = Watcher(plural, namespace, selector, lambda item: None)
        with self.lock:
            found = [
                copy.deepcopy(obj)
                for key, obj in sorted(self.objects.items(), key=lambda kv: str(kv[0]))
                if probe.selects(key[0], obj)
            ]
            return found, str(self.version)

    def all(self, plural: str) -> builtins.list[JsonObject]:
        """Every object of ``plural``, for a test's assertions."""
        return self.list(plural, None, {})[0]

    # -- writes -------------------------------------------------------------------------------

    def _stamp(self, plural: str, obj: JsonObject, old: JsonObject | None) -> JsonObject:
        self.version += 1
        metadata = obj.setdefault("metadata", {})
        kept = old["metadata"] if old is not None else {}
        metadata["uid"] = kept.get("uid") or metadata.get("uid") or str(uuid.uuid4())
        metadata["creationTimestamp"] = kept.get("creationTimestamp") or now_rfc3339()
        metadata["resourceVersion"] = str(self.version)
        changed = old is None or old.get("spec") != obj.get("spec")
        generation = int(kept.get("generation", 0))
        metadata["generation"] = generation + 1 if changed else generation
        if plural == "resourceslices":
            stamp_taints(obj)
        return obj

    def _record(self, plural: str, event: Event) -> None:
        self.history.append((plural, event))
        for watcher in self.watchers:
            if watcher.selects(plural, event.object):
                watcher.deliver(Event(event.type, copy.deepcopy(event.object)))
        self.lock.notify_all()

    def create(
        self, plural: str, namespace: str | None, body: JsonObject, dropped: tuple[str, ...] = ()
    ) -> JsonObject:
        stored = copy.deepcopy(body)
        name = at(stored, "metadata.name")
        if not isinstance(name, str) or not name:
            raise StatusError(422, "Invalid", f"{plural}: metadata.name: Required value")
        for path in dropped:
            drop(stored, path)
        with self.lock:
            key = (plural, namespace, name)
            if key in self.objects:
                raise StatusError(409, "AlreadyExists", f'{plural} "{name}" already exists')
            self.objects[key] = self._stamp(plural, stored, None)
            self._record(plural, Event("ADDED", copy.deepcopy(stored)))
            return copy.deepcopy(stored)

    def replace(
        self,
        plural: str,
        namespace: str | None,
        name: str,
        body: JsonObject,
        dropped: tuple[str, ...] = (),
    ) -> JsonObject:
        stored = copy.deepcopy(body)
        if at(stored, "metadata.name") != name:
            raise StatusError(400, "BadRequest", "the name of the object does not match the URL")
        for path in dropped:
            drop(stored, path)
        with self.lock:
            old = self.objects.get((plural, namespace, name))
            if old is None:
                raise not_found(plural, name)
            sent = stored["metadata"].get("resourceVersion")
            if sent and sent != old["metadata"]["resourceVersion"]:
                message = (
                    f'Operation cannot be fulfilled on {plural} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again"
                )
                raise StatusError(409, "Conflict", message)
            self.objects[(plural, namespace, name)] = self._stamp(plural, stored, old)
            self._record(plural, Event("MODIFIED", copy.deepcopy(stored)))
            return copy.deepcopy(stored)

    def delete(self, plural: str, namespace: str | None, name: str) -> JsonObject:
        with self.lock:
            old = self.objects.pop((plural, namespace, name), None)
            if old is None:
                raise not_found(plural, name)
            self._deleted(plural, old)
            return copy.deepcopy(old)

    def _deleted(self, plural: str, old: JsonObject) -> None:
        # The real server's DELETED event carries the deletion's own resourceVersion.
        self.version += 1
        old["metadata"]["resourceVersion"] = str(self.version)
        self._record(plural, Event("DELETED", old))

    def wipe(self, plural: str = "resourceslices") -> int:
        """Delete every object of ``plural``, each with its DELETED event (the kubelet does this
        to the node's slices at its start); how many there were."""
        with self.lock:
            keys = [key for key in self.objects if key[0] == plural]
            for key in keys:
                self._deleted(plural, self.objects.pop(key))
            return len(keys)

    # -- watches ------------------------------------------------------------------------------

    def watch(
        self,
        plural: str,
        namespace: str | None,
        selector: Mapping[str, str],
        since: str | None,
        deliver: Callable[[WatchItem], None],
    ) -> Watcher | None:
        """Open a watch; its first events are delivered before this returns. None when it ended
        at once (a version older than the history: an ERROR event with a 410 Status)."""
        watcher = Watcher(plural, namespace, dict(selector), deliver)
        with self.lock:
            if since in (None, "", "0"):
                for obj in self.list(plural, namespace, selector)[0]:
                    deliver(Event("ADDED", obj))
            else:
                start = _version(since)
                if start < self.oldest:
                    deliver(End("gone"))
                    return None
                for kind, event in self.history:
                    version = int(event.object["metadata"]["resourceVersion"])
                    if version > start and watcher.selects(kind, event.object):
                        deliver(Event(event.type, copy.deepcopy(event.object)))
            self.watchers.append(watcher)
            self.lock.notify_all()
            return watcher

    def unwatch(self, watcher: Watcher) -> None:
        with self.lock:
            if watcher in self.watchers:
                self.watchers.remove(watcher)
            self.lock.notify_all()

    def end_watches(self, how: Ending = "clean", *, wipe: str | None = None) -> int:
        """End every open watch: ``clean`` (end of stream), ``gone`` (an ERROR event with a 410
        Status; the history is compacted, so resuming from an old version is 410 too) or
        ``garbage`` (a line that is not JSON). With ``wipe`` (a plural), that resource is wiped
        in the same step: its DELETED events are lost to the watches just ended, as events in
        the gap of a broken watch are. How many watches were ended."""
        with self.lock:
            ended, self.watchers = self.watchers, []
            for watcher in ended:
                watcher.deliver(End(how))
            if how == "gone":
                self.compact()
            if wipe is not None:
                self.wipe(wipe)
            self.lock.notify_all()
            return len(ended)

    def bookmark(self) -> None:
        """A BOOKMARK event (the current resourceVersion, nothing else) on every open watch."""
        with self.lock:
            for watcher in self.watchers:
                obj = {"kind": "", "metadata": {"resourceVersion": str(self.version)}}
                watcher.deliver(Event("BOOKMARK", obj))

    def compact(self) -> None:
        """Forget the history: a watch resumed from any version before now is 410 Gone."""
        with self.lock:
            self.history.clear()
            self.oldest = self.version


def _version(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise StatusError(400, "BadRequest", f"invalid resourceVersion {text!r}") from None
