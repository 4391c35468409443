"""What each REST verb of the test API server does to its store, and how a watch's events are
written: the part between a parsed request (apiserver_wire) and the objects (apiserver_store).

A watch is a chunked response of JSON lines that lasts until the server ends it (an ``End``:
a clean end of stream, an ERROR event holding a 410 Status, or a line that is not JSON), its
``timeoutSeconds`` pass (a clean end, as the real server's), or the client leaves.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tests.support.apiserver_fields import JsonObject
from tests.support.apiserver_store import (
    End,
    Event,
    ObjectStore,
    StatusError,
    WatchItem,
    gone_status,
)
from tests.support.apiserver_wire import (
    GARBAGE,
    LAST_CHUNK,
    Call,
    Request,
    body_object,
    chunk,
    event_line,
    field_selector,
)


def apply_call(
    store: ObjectStore, call: Call, request: Request, dropped: tuple[str, ...]
) -> tuple[int, JsonObject]:
    """The status code and body of a get, list, create, update or delete; writes keep none of
    the ``dropped`` paths."""
    resource, name = call.resource, call.name or ""
    plural, namespace = resource.plural, call.namespace
    if call.verb == "get":
        return 200, store.get(plural, namespace, name)
    if call.verb == "list":
        items, version = store.list(plural, namespace, field_selector(request, resource))
        kind = {"kind": f"{resource.kind}List", "apiVersion": resource.api_version}
        return 200, {**kind, "metadata": {"resourceVersion": version}, "items": items}
    if call.verb == "delete":
        old = store.delete(plural, namespace, name)
        details = {"name": name, "group": resource.group, "kind": plural}
        details["uid"] = old["metadata"]["uid"]
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                     "status": "Success", "details": details}  # fmt: skip
    if call.verb == "patch":
        return 200, store.replace(plural, namespace, name, patched(store, call, request), dropped)
    body = written(call, request)
    if call.verb == "create":
        return 201, store.create(plural, namespace, body, dropped)
    return 200, store.replace(plural, namespace, name, body, dropped)


def merged(target: object, patch: object) -> object:
    """RFC 7386 JSON merge patch of ``patch`` onto ``target``: objects merge key by key, a null
    removes the key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merged(result.get(key), value)
    return result


def patched(store: ObjectStore, call: Call, request: Request) -> JsonObject:
    """A PATCH's result: a merge patch (the only kind served) onto the stored object."""
    if request.headers.get("content-type", "") != "application/merge-patch+json":
        raise StatusError(415, "UnsupportedMediaType", "this test server takes merge patches only")
    current = store.get(call.resource.plural, call.namespace, call.name or "")
    result = merged(current, body_object(request))
    assert isinstance(result, dict)
    return result


def written(call: Call, request: Request) -> JsonObject:
    """A create's or update's body as the server takes it: its kind checked, the fields only
    the server sets removed, the namespace the URL's."""
    body = body_object(request)
    resource = call.resource
    if body.get("kind", resource.kind) != resource.kind:
        raise StatusError(400, "BadRequest", f"the body is a {body['kind']}, not a {resource.kind}")
    body["kind"], body["apiVersion"] = resource.kind, resource.api_version
    metadata = body.setdefault("metadata", {})
    server_set = ("uid", "creationTimestamp", "generation")
    for key in (*server_set, "resourceVersion") if call.verb == "create" else server_set:
        metadata.pop(key, None)
    if call.namespace is not None:
        metadata["namespace"] = call.namespace
    if call.verb == "create" and not metadata.get("name") and metadata.get("generateName"):
        metadata["name"] = f"{metadata['generateName']}{uuid.uuid4().hex[:5]}"
    return body


async def stream_watch(
    queue: asyncio.Queue[WatchItem],
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    timeout: float | None,
) -> bool:
    """Write a watch's events as chunks until it ends (an End, ``timeout``: the connection goes
    on) or the client leaves (it does not)."""
    left = asyncio.ensure_future(reader.read(1))  # a client sends nothing more while watching
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    try:
        while True:
            item = await next_item(queue, left, deadline)
            if left.done():
                return False
            if isinstance(item, Event):
                writer.write(chunk(event_line(item.type, item.object)))
                await writer.drain()
                continue
            if isinstance(item, End) and item.how == "gone":
                status = gone_status("too old resource version (the test server compacted)")
                writer.write(chunk(event_line("ERROR", status)))
            elif isinstance(item, End) and item.how == "garbage":
                writer.write(chunk(GARBAGE))
            writer.write(LAST_CHUNK)  # an End, or the watch's timeoutSeconds passed
            await writer.drain()
            return True
    finally:
        left.cancel()
        # Gone before the connection reads its next request: one reader at a time.
        await asyncio.wait({left})


async def next_item(
    queue: asyncio.Queue[WatchItem], left: asyncio.Future[bytes], deadline: float | None
) -> WatchItem | None:
    """The next item, or None when the client left or the deadline passed first."""
    getter = asyncio.ensure_future(queue.get())
    timeout = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
    try:
        waiting: set[asyncio.Future[Any]] = {getter, left}
        await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not getter.done():
            getter.cancel()
    # Done though not reported done: an item taken off the queue must not be lost.
    return getter.result() if getter.done() and not getter.cancelled() else None
