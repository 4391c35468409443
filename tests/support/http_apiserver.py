"""A Kubernetes API server over real HTTP for tests, that misbehaves when told to.

Plain HTTP/1.1 on 127.0.0.1 at a random port, served by an asyncio loop on its own thread, so a
test (or a daemon in a subprocess, through its own client) talks to it as to the real one: nodes GET,
resourceclaims GET (namespaced), resourceslices LIST / WATCH / GET / POST / PUT / DELETE, with
Status objects for errors. The objects and watches are ``store`` (apiserver_store), refusals,
dropped fields and the request log are ``faults`` (apiserver_faults); both may be used from the
test thread at any time. Pods and resourceclaimtemplates are served too (the kubectl plugin reads
them), listed across namespaces as the real server lists them. The connection-level faults are
here: ``away`` (the listening socket closed and every connection reset, until ``back`` listens
on the same port again) and ``freeze`` (requests are read but not answered for a while).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import threading
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from tests.support.apiserver_faults import Faults, RequestRecord
from tests.support.apiserver_fields import JsonObject
from tests.support.apiserver_rest import apply_call, stream_watch
from tests.support.apiserver_store import ObjectStore, StatusError, WatchItem
from tests.support.apiserver_wire import (
    PLURALS,
    WATCH_HEAD,
    Call,
    Request,
    answer,
    field_selector,
    parse_call,
    read_request,
    status_object,
)

HOST = "127.0.0.1"
TOKEN = "kae-test-token"
DEADLINE = 10.0  # for the test thread's calls into the server's loop
T = TypeVar("T")


class HttpApiServer:
    """The server; ``with HttpApiServer() as api:`` serves until the block ends."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.lock = threading.Condition()  # one lock for the store, the faults and waiting
        self.store = ObjectStore(self.lock)
        self.faults = Faults(self.lock)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="apiserver", daemon=True
        )
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.StreamWriter, asyncio.Task[Any]] = {}
        self._frozen_until = 0.0
        self._thawed = asyncio.Event()
        self._held: set[tuple[str, str]] = set()  # (verb, plural) whose requests wait
        self._released = asyncio.Event()
        self.errors: list[Exception] = []  # raised while serving: a bug here, not the client's

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    # -- life ---------------------------------------------------------------------------------

    def start(self) -> HttpApiServer:
        self._thread.start()
        self._on_loop(self._listen())
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._on_loop(self._close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(DEADLINE)
        self._loop.close()
        if self.errors:
            raise AssertionError(f"the test API server failed: {self.errors!r}") from self.errors[0]

    def __enter__(self) -> HttpApiServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(DEADLINE)

    async def _listen(self) -> None:
        # The same port again after away(): SO_REUSEADDR (asyncio's default on POSIX) lets it.
        self._server = await asyncio.start_server(self._connection, HOST, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        tasks = list(self._connections.values())
        for writer, task in list(self._connections.items()):
            _reset(writer)
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- connection-level faults ----------------------------------------------------------------

    def away(self) -> None:
        """Stop listening and reset every open connection: clients get connection refused."""
        self._on_loop(self._close())

    def back(self) -> None:
        """Listen again, on the same port."""
        self._on_loop(self._listen())

    def freeze(self, seconds: float) -> None:
        """Accept and read requests, answer none of them for ``seconds`` (or until ``thaw``)."""

        def frozen() -> None:
            self._frozen_until = self._loop.time() + seconds
            self._thawed.clear()

        self._loop.call_soon_threadsafe(frozen)

    def thaw(self) -> None:
        """Answer again; the requests held meanwhile are answered now."""

        def thawed() -> None:
            self._frozen_until = 0.0
            self._thawed.set()

        self._loop.call_soon_threadsafe(thawed)

    def hold(self, verb: str, plural: str) -> None:
        """Accept and read every ``verb`` request of ``plural``, answer none until ``release``;
        every other request is answered as usual."""

        def held() -> None:
            self._held.add((verb, plural))
            self._released.clear()

        self._loop.call_soon_threadsafe(held)

    def release(self) -> None:
        """Answer the held requests, and hold none from now on."""

        def released() -> None:
            self._held.clear()
            self._released.set()

        self._loop.call_soon_threadsafe(released)

    # -- what tests seed, read and wait for ---------------------------------------------------

    def seed(self, plural: str, obj: JsonObject) -> JsonObject:
        """Store ``obj`` as is (its uid kept), as if someone had created it."""
        namespace = obj["metadata"].get("namespace") if PLURALS[plural].namespaced else None
        return self.store.create(plural, namespace, obj)

    def seed_node(self, name: str, uid: str | None = None) -> str:
        """A Node named ``name``; its uid (the owner the driver's slices must name)."""
        node: JsonObject = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        node["metadata"]["uid"] = uid or str(uuid.uuid4())
        return str(self.seed("nodes", node)["metadata"]["uid"])

    def slices(self) -> list[JsonObject]:
        return self.store.all("resourceslices")

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate()`` holds, re-checked on every request and every change."""
        with self.lock:
            return self.lock.wait_for(predicate, timeout)

    def kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig naming this server (plain http) and a token user."""
        return write_kubeconfig(path, self.url, self.token)

    # -- serving --------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[writer] = task
        try:
            while (request := await read_request(reader)) is not None:
                if not await self._respond(request, reader, writer):
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client left, or away() / stop() reset the connection
        except Exception as err:  # a bug of this server: stop() fails the test with it
            self.errors.append(err)
        finally:
            self._connections.pop(writer, None)
            writer.close()

    async def _respond(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; whether the connection goes on."""
        headers: dict[str, str] = {}
        entry: RequestRecord | None = None
        call = None
        try:
            call = parse_call(request)
            entry = self.faults.record(call.verb, call.resource.plural, call.name)
            await self._while_frozen()
            if (call.verb, call.resource.plural) in self._held:
                await self._released.wait()
            self._admit(request, call)
            if call.verb == "watch":
                return await self._watch(call, request, reader, writer, entry)
            dropped = self.faults.dropped_for(call.resource.plural)
            code, body = apply_call(self.store, call, request, dropped)
        except StatusError as err:
            if err.details is not None and "kind" in err.details and call is not None:
                err.details.setdefault("group", call.resource.group)  # as the real server names it
            code, body = err.code, status_object(err)
            if err.retry_after is not None:
                headers["Retry-After"] = str(err.retry_after)
        if entry is not None:
            self.faults.answered(entry, code)
        writer.write(answer(code, body, headers))
        await writer.drain()
        return request.headers.get("connection", "").lower() != "close"

    async def _while_frozen(self) -> None:
        remaining = self._frozen_until - self._loop.time()
        if remaining > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._thawed.wait()

    def _admit(self, request: Request, call: Call) -> None:
        if request.headers.get("authorization") != f"Bearer {self.token}":
            raise StatusError(401, "Unauthorized", "Unauthorized")
        refusal = self.faults.refusal_for(call.verb, call.resource.plural)
        if refusal is not None:
            raise refusal

    async def _watch(
        self,
        call: Call,
        request: Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        entry: RequestRecord,
    ) -> bool:
        selector = field_selector(request, call.resource)
        queue: asyncio.Queue[WatchItem] = asyncio.Queue()

        def deliver(item: WatchItem) -> None:  # from any thread, under the store's lock
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is watching
                self._loop.call_soon_threadsafe(queue.put_nowait, item)

        since = request.query.get("resourceVersion")
        watcher = self.store.watch(call.resource.plural, call.namespace, selector, since, deliver)
        self.faults.answered(entry, 200)
        writer.write(WATCH_HEAD)
        if self.faults.watches_end_at_once:  # as a proxy that ends streams cleanly at once
            if watcher is not None:
                self.store.unwatch(watcher)
            writer.write(b"0\r\n\r\n")
            return True
        timeout = float(request.query.get("timeoutSeconds") or 0) or None
        try:
            return await stream_watch(queue, reader, writer, timeout)
        finally:
            if watcher is not None:
                self.store.unwatch(watcher)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (RST), not a FIN: the client sees ECONNRESET, as when a server dies."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def write_kubeconfig(path: Path, server: str, token: str) -> Path:
    """A kubeconfig (JSON is YAML) with one cluster at ``server`` and a token user."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "driver", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "driver"}}],
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path
