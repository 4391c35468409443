"""An in-memory API server behind ``apiserver.seam.ApiServer``, for unit tests of what sits on
the seam; the real one (through lightkube) is proven against the e2e cluster's API server and,
in a real daemon process, against the HTTP test server (``http_apiserver``).

It keeps what the real one does that a controller depends on: resourceVersion checks on replace
(409 Conflict), AlreadyExists and NotFound, field selectors on dotted paths, watch events for
every change, (``drop``) fields it does not keep, as a server whose feature gate is off, and the
``timeAdded`` it stamps on a ResourceSlice device taint written without one.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid
from collections.abc import AsyncIterator, Mapping

from kae_deviceplugin.apiserver.seam import JsonObject, Kind
from kae_deviceplugin.errors import ApiError
from tests.support.apiserver_fields import at, drop, stamp_taints


class FakeApiServer:
    """Objects by (plural, namespace, name); every write counted, every change watched."""

    def __init__(self, drop: tuple[str, ...] = ()) -> None:
        self.objects: dict[tuple[str, str | None, str], JsonObject] = {}
        self.drop = drop  # dotted paths the server does not keep ("spec.devices.taints")
        self.writes = 0
        self.fail_next: ApiError | None = None  # raised by the next call, once
        self._versions = itertools.count(1)
        self._watchers: list[tuple[str, dict[str, str], asyncio.Queue[tuple[str, JsonObject]]]] = []

    def _key(self, kind: Kind, name: str, namespace: str | None) -> tuple[str, str | None, str]:
        return (kind.plural, namespace if kind.namespaced else None, name)

    def _maybe_fail(self) -> None:
        error, self.fail_next = self.fail_next, None
        if error is not None:
            raise error

    def _notify(self, kind: Kind, event: str, obj: JsonObject) -> None:
        for plural, selector, queue in self._watchers:
            if plural == kind.plural and all(at(obj, k) == v for k, v in selector.items()):
                queue.put_nowait((event, copy.deepcopy(obj)))

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        self._maybe_fail()
        found = self.objects.get(self._key(kind, name, namespace))
        if found is None:
            raise ApiError(f"{kind.plural}/{name} not found", status=404, reason="NotFound")
        return copy.deepcopy(found)

    async def list(self, kind: Kind, field_selector: Mapping[str, str]) -> list[JsonObject]:
        self._maybe_fail()
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
        self._maybe_fail()
        name, namespace = body["metadata"]["name"], body["metadata"].get("namespace")
        if self._key(kind, name, namespace) in self.objects:
            raise ApiError(f"{kind.plural}/{name} exists", status=409, reason="AlreadyExists")
        return self._store(kind, body, "ADDED")

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject:
        self._maybe_fail()
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

    async def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        self._maybe_fail()
        old = self.objects.pop(self._key(kind, name, namespace), None)
        if old is None:
            raise ApiError(f"{kind.plural}/{name} not found", status=404, reason="NotFound")
        self.writes += 1
        self._notify(kind, "DELETED", old)

    async def watch(
        self, kind: Kind, field_selector: Mapping[str, str]
    ) -> AsyncIterator[tuple[str, JsonObject]]:
        queue: asyncio.Queue[tuple[str, JsonObject]] = asyncio.Queue()
        entry = (kind.plural, dict(field_selector), queue)
        for obj in await self.list(kind, field_selector):  # as a watch from "now" starts
            queue.put_nowait(("ADDED", obj))
        self._watchers.append(entry)
        try:
            while True:
                yield await queue.get()
        finally:
            self._watchers.remove(entry)

    async def close(self) -> None:
        """Nothing to release."""

    def wipe(self, kind: Kind) -> None:
        """Delete every object of ``kind`` as someone else would (the kubelet at its start)."""
        for key in [k for k in self.objects if k[0] == kind.plural]:
            self._notify(kind, "DELETED", self.objects.pop(key))
