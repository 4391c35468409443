"""An in-memory API server behind ``apiserver.seam.ApiServer``, for unit tests of what sits on
the seam; the real one (the project's own client) is proven against the e2e cluster's API server and,
in a real daemon process, against the HTTP test server (``http_apiserver``).

It keeps what the real one does that a controller depends on: resourceVersion checks on replace
(409 Conflict), AlreadyExists and NotFound, field selectors on dotted paths, watch events for
every change, (``drop``) fields it does not keep, as a server whose feature gate is off, and the
``timeAdded`` it stamps on a ResourceSlice device taint written without one.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import itertools
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import Final

from kae_deviceplugin.apiserver.seam import JsonObject, Kind
from kae_deviceplugin.errors import ApiError
from tests.support.apiserver_fields import at, drop, stamp_taints

_END: Final[tuple[str, JsonObject]] = ("END", {})  # a watch the server ends cleanly
_Event = tuple[str, JsonObject] | Exception


class FakeApiServer:
    """Objects by (plural, namespace, name); every write counted, every change watched."""

    def __init__(self, drop: tuple[str, ...] = ()) -> None:
        self.objects: dict[tuple[str, str | None, str], JsonObject] = {}
        self.drop = drop  # dotted paths the server does not keep ("spec.devices.taints")
        self.writes = 0
        self.fail_next: ApiError | None = None  # raised by the next call, once
        self.refuse: dict[str, ApiError] = {}  # verb -> raised by every such call until removed
        self.calls: Counter[str] = Counter()  # by verb: get, list, create, update, delete, watch
        self._versions = itertools.count(1)
        self._log: list[tuple[int, str, str, JsonObject]] = []  # (version, plural, event, obj)
        self._watchers: list[tuple[str, dict[str, str], asyncio.Queue[_Event]]] = []

    def _key(self, kind: Kind, name: str, namespace: str | None) -> tuple[str, str | None, str]:
        return (kind.plural, namespace if kind.namespaced else None, name)

    def _maybe_fail(self, verb: str) -> None:
        self.calls[verb] += 1
        error, self.fail_next = self.fail_next, None
        if error is not None:
            raise error
        if verb in self.refuse:
            raise self.refuse[verb]

    def _notify(self, kind: Kind, event: str, obj: JsonObject) -> None:
        version = int(obj["metadata"].get("resourceVersion") or next(self._versions))
        self._log.append((version, kind.plural, event, copy.deepcopy(obj)))
        for plural, selector, queue in self._watchers:
            if plural == kind.plural and all(at(obj, k) == v for k, v in selector.items()):
                queue.put_nowait((event, copy.deepcopy(obj)))

    def break_watches(self, error: Exception | None = None) -> None:
        """End every open watch: with ``error`` (an ApiError such as 410 Gone, or anything a
        broken stream raises), or cleanly when None."""
        for _plural, _selector, queue in self._watchers:
            queue.put_nowait(error or _END)

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        self._maybe_fail("get")
        found = self.objects.get(self._key(kind, name, namespace))
        if found is None:
            details = {"name": name, "group": kind.group, "kind": kind.plural}
            raise ApiError(
                f"{kind.plural}/{name} not found", status=404, reason="NotFound", details=details
            )
        return copy.deepcopy(found)

    async def list(self, kind: Kind, field_selector: Mapping[str, str]) -> list[JsonObject]:
        self._maybe_fail("list")
        return self._listed(kind, field_selector)

    async def list_versioned(
        self, kind: Kind, field_selector: Mapping[str, str]
    ) -> tuple[builtins.list[JsonObject], str]:
        self._maybe_fail("list")
        return self._listed(kind, field_selector), str(self._log[-1][0] if self._log else 0)

    def _listed(self, kind: Kind, field_selector: Mapping[str, str]) -> builtins.list[JsonObject]:
        return [
            copy.deepcopy(obj)
            for (plural, _, _), obj in sorted(self.objects.items())
            if plural == kind.plural and all(at(obj, k) == v for k, v in field_selector.items())
        ]

    def _store(self, kind: Kind, body: JsonObject, event: str) -> JsonObject:
        stored = copy.deepcopy(body)
        for path in self.drop:
            drop(stored, path)
        stamp_taints(stored)
        metadata = stored.setdefault("metadata", {})
        metadata.setdefault("uid", str(uuid.uuid4()))
        metadata["resourceVersion"] = str(next(self._versions))
        self.objects[self._key(kind, metadata["name"], metadata.get("namespace"))] = stored
        self.writes += 1
        self._notify(kind, event, stored)
        return copy.deepcopy(stored)

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject:
        self._maybe_fail("create")
        name, namespace = body["metadata"]["name"], body["metadata"].get("namespace")
        if self._key(kind, name, namespace) in self.objects:
            raise ApiError(f"{kind.plural}/{name} exists", status=409, reason="AlreadyExists")
        return self._store(kind, body, "ADDED")

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject:
        self._maybe_fail("update")
        metadata = body["metadata"]
        old = self.objects.get(self._key(kind, metadata["name"], metadata.get("namespace")))
        if old is None:
            raise ApiError(
                f"{kind.plural}/{metadata['name']} not found", status=404, reason="NotFound"
            )
        if metadata.get("resourceVersion") != old["metadata"]["resourceVersion"]:
            raise ApiError("the object has been modified", status=409, reason="Conflict")
        body = {**body, "metadata": {**metadata, "uid": old["metadata"]["uid"]}}
        return self._store(kind, body, "MODIFIED")

    async def apply_status(self, kind: Kind, body: JsonObject) -> JsonObject:
        """Server-side apply of the status as one manager: its ``status`` replaces the stored
        one (this fake knows one manager); 404 when the object is gone."""
        self._maybe_fail("patch")
        metadata = body["metadata"]
        old = self.objects.get(self._key(kind, metadata["name"], metadata.get("namespace")))
        if old is None:
            raise ApiError(f"{kind.plural}/{metadata['name']} not found", status=404)
        status = {**old.get("status", {}), **copy.deepcopy(body.get("status", {}))}
        return self._store(kind, {**old, "status": status}, "MODIFIED")

    async def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        self._maybe_fail("delete")
        old = self.objects.pop(self._key(kind, name, namespace), None)
        if old is None:
            raise ApiError(f"{kind.plural}/{name} not found", status=404, reason="NotFound")
        self.writes += 1
        self._notify(kind, "DELETED", {**old, "metadata": {**old["metadata"],
                     "resourceVersion": str(next(self._versions))}})  # fmt: skip

    async def watch(
        self, kind: Kind, field_selector: Mapping[str, str], start: str | None = None
    ) -> AsyncIterator[tuple[str, JsonObject]]:
        self._maybe_fail("watch")
        queue: asyncio.Queue[_Event] = asyncio.Queue()
        entry = (kind.plural, dict(field_selector), queue)
        if start is None:  # as a watch from "now" starts: every object as ADDED
            for obj in self._listed(kind, field_selector):
                queue.put_nowait(("ADDED", obj))
        else:  # from a list's version: what happened since
            for version, plural, event, obj in self._log:
                selected = all(at(obj, k) == v for k, v in field_selector.items())
                if version > int(start) and plural == kind.plural and selected:
                    queue.put_nowait((event, copy.deepcopy(obj)))
        self._watchers.append(entry)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, Exception):
                    raise item
                if item is _END:
                    return
                yield item
        finally:
            self._watchers.remove(entry)

    async def close(self) -> None:
        """Nothing to release."""

    def wipe(self, kind: Kind) -> None:
        """Delete every object of ``kind`` as someone else would (the kubelet at its start)."""
        for key in [k for k in self.objects if k[0] == kind.plural]:
            old = self.objects.pop(key)
            version = str(next(self._versions))
            self._notify(kind, "DELETED", {**old, "metadata": {**old["metadata"],
                         "resourceVersion": version}})  # fmt: skip
