"""The HTTP side of the test API server: requests read off a stream, the REST paths and verbs of
the resources it serves, and answers as the Kubernetes API server writes them.

Shaped after what lightkube 1.0 sends (``lightkube/core/generic_client.py``): cluster-scoped
``/apis/<group>/<version>/<plural>[/<name>]``, namespaced ``.../namespaces/<ns>/<plural>/<name>``,
core ``/api/v1/...``; a list or watch is a GET of the collection, a watch with ``watch=true``
(``1`` too), ``fieldSelector=k=v,k=v``, and ``resourceVersion`` when it resumes; writes carry
``fieldManager``. Errors are ``Status`` objects with ``Content-Type: application/json``, which is
what makes lightkube raise its ApiError (another content type gives a bare HTTP error).
"""

from __future__ import annotations

import asyncio
import http
import json
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from tests.support.apiserver_fields import JsonObject
from tests.support.apiserver_store import StatusError

MAX_HEAD = 64 * 1024
MAX_BODY = 16 * 1024 * 1024


@dataclass(frozen=True)
class Resource:
    """A served resource: its API group and version, plural and kind, and its scope."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    field_labels: frozenset[str] = frozenset({"metadata.name", "metadata.namespace"})

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


# The field labels the real server accepts for a ResourceSlice (others are a 400).
SLICE_FIELDS = frozenset({"metadata.name", "spec.nodeName", "spec.driver", "spec.pool.name"})
POD_FIELDS = frozenset({"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"})
RESOURCES = {
    (r.group, r.version, r.plural): r
    for r in (
        Resource("", "v1", "nodes", "Node", namespaced=False),
        Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False, SLICE_FIELDS),
        Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", namespaced=True),
        Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False),
        # What kubectl kae reads besides: pods and the templates of their claims.
        Resource("", "v1", "pods", "Pod", True, POD_FIELDS),
        Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    )
}
PLURALS = {r.plural: r for r in RESOURCES.values()}


@dataclass(frozen=True)
class Request:
    """One HTTP request: method, path, query (last value of each key), headers (lower-case)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Call:
    """What a request asks of the API: a verb on a resource, a namespace, an object's name."""

    verb: str
    resource: Resource
    namespace: str | None
    name: str | None


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request on a connection; None at its end (or on a request we cannot read)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _version = lines[0].split(" ", 2)
    except ValueError:
        return None
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    if length > MAX_BODY:
        return None
    try:
        body = await reader.readexactly(length) if length else b""
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    url = urlsplit(target)
    return Request(method, url.path, dict(parse_qsl(url.query)), headers, body)


def parse_call(request: Request) -> Call:
    """The verb, resource, namespace and name a request's method and path name."""
    parts = [p for p in request.path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise StatusError(404, "NotFound", f"the server could not find {request.path}")
    namespace = None
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = RESOURCES.get((group, version, rest[0] if rest else ""))
    if resource is None or len(rest) > 2 or (namespace is not None and not resource.namespaced):
        raise StatusError(404, "NotFound", f"the server could not find {request.path}")
    name = rest[1] if len(rest) == 2 else None
    verb = _verb(request, name)
    if resource.namespaced and namespace is None and verb not in ("list", "watch"):
        raise StatusError(404, "NotFound", f"the server could not find {request.path}")
    return Call(verb, resource, namespace, name)


def _verb(request: Request, name: str | None) -> str:
    watching = request.query.get("watch", "").lower() in ("true", "1")
    verbs = {
        ("GET", False): "watch" if watching else "list",
        ("GET", True): "get",
        ("POST", False): "create",
        ("PUT", True): "update",
        ("DELETE", True): "delete",
    }
    verb = verbs.get((request.method, name is not None))
    if verb is None:
        raise StatusError(405, "MethodNotAllowed", f"{request.method} is not supported here")
    return verb


def field_selector(request: Request, resource: Resource) -> dict[str, str]:
    """``fieldSelector`` as {path: value}: equality only, on the labels the resource has."""
    if request.query.get("labelSelector"):
        raise StatusError(400, "BadRequest", "this test server does not serve labelSelector")
    selector = {}
    text = request.query.get("fieldSelector", "")
    for term in filter(None, text.split(",")):
        path, sep, value = term.partition("==") if "==" in term else term.partition("=")
        if not sep or path.endswith("!"):
            raise StatusError(400, "BadRequest", f"unsupported field selector term {term!r}")
        if path not in resource.field_labels:
            message = f'field label not supported: "{path}" for {resource.kind}'
            raise StatusError(400, "BadRequest", message)
        selector[path] = value
    return selector


def body_object(request: Request) -> JsonObject:
    """The JSON object a create or update sends; a 400 Status when it is not one."""
    try:
        obj = json.loads(request.body)
    except ValueError as err:
        raise StatusError(400, "BadRequest", f"the body is not JSON: {err}") from None
    if not isinstance(obj, dict):
        raise StatusError(400, "BadRequest", "the body is not a JSON object")
    return obj


def status_object(err: StatusError) -> JsonObject:
    """A refusal as the API server spells it: a v1 Status."""
    status: JsonObject = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": err.message,
        "reason": err.reason,
        "code": err.code,
    }
    details = dict(err.details or {})
    if err.retry_after is not None:
        details["retryAfterSeconds"] = err.retry_after
    if details:
        status["details"] = details
    return status


def answer(code: int, body: JsonObject, headers: dict[str, str] | None = None) -> bytes:
    """A whole JSON response with its length (the connection stays open)."""
    payload = json.dumps(body).encode()
    head = [f"HTTP/1.1 {code} {http.HTTPStatus(code).phrase}"]
    fields = {"Content-Type": "application/json", "Content-Length": str(len(payload))}
    fields.update(headers or {})
    head += [f"{name}: {value}" for name, value in fields.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


WATCH_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
)
LAST_CHUNK = b"0\r\n\r\n"
GARBAGE = b"<html>this is not a watch event</html>\n"


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def event_line(event_type: str, obj: JsonObject) -> bytes:
    """A watch event as one JSON line."""
    return json.dumps({"type": event_type, "object": obj}).encode() + b"\n"
