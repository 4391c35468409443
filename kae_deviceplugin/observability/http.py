"""The HTTP endpoint on ``--metrics-address``: /metrics, /healthz, /readyz and /allocations.

A bounded server on its own threads (http_server.py) keeps scrapes and probes off the event loop,
yet every answer about the daemon is computed *on* the loop (one short callback, waited for with a
deadline): reads never race the loop's updates, and a wedged loop fails /healthz instead of
being reported healthy by a thread that is still fine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import socket
import threading
from collections.abc import Callable, Mapping, Set
from pathlib import Path
from typing import Protocol

from kae_deviceplugin.config.rules import parse_address
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.core.model import Inventory, QueueBook
from kae_deviceplugin.core.vf_plan import VfChange
from kae_deviceplugin.core.views import ResourceView
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.discovery.node_facts import read_node_facts
from kae_deviceplugin.kubelet.podresources import (
    LIST_TIMEOUT,
    MAX_AGE,
    Allocations,
    AllocationsSource,
)
from kae_deviceplugin.observability.http_answer import (
    Headers,
    Response,
    Route,
    route_answer,
    text,
)
from kae_deviceplugin.observability.http_server import BACKLOG, BoundedHttpServer, connection_cap
from kae_deviceplugin.observability.loop_calls import LoopCalls
from kae_deviceplugin.observability.metrics import Snapshot, exposition

log = logging.getLogger(__name__)

# A loop callback takes microseconds; 2 s without one running means the loop is stuck. (Give
# the DaemonSet's probes timeoutSeconds >= 3 so they see the 503 rather than their own timeout.)
LOOP_TIMEOUT = 2.0
BIND_RETRY = 5.0
# /allocations in DRA mode: no device-plugin allocation exists there (the list is truly empty),
# and the pod-resources API, which the DRA pod does not mount, would not list claims anyway.
DRA_ALLOCATIONS: dict[str, object] = {
    "allocations": [],
    "note": "DRA mode: devices are held by ResourceClaims; `kae-deviceplugin list --mode dra` "
    "on the node names each device's claim",
}


def listen(host: str, port: int) -> socket.socket:
    """A listening socket; "" host means every interface of both families, as on most servers."""
    if host == "":
        if socket.has_dualstack_ipv6():
            return socket.create_server(
                ("::", port), family=socket.AF_INET6, backlog=BACKLOG, dualstack_ipv6=True
            )
        host = "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=BACKLOG)


class HttpEndpoint:
    """A route table served by a bounded HTTP server (http_server.py) on a daemon thread."""

    def __init__(self, routes: Mapping[str, Route]) -> None:
        self.routes = routes
        self._server: BoundedHttpServer | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    def start(self, host: str, port: int) -> None:
        """Bind (OSError if the address is taken or invalid) and serve in the background."""
        listener = listen(host, port)
        self._port = int(listener.getsockname()[1])
        server = BoundedHttpServer(listener, route_answer(self.routes), connection_cap())
        self._thread = threading.Thread(target=server.serve, name="http", daemon=True)
        self._server = server
        self._thread.start()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the endpoint is not bound")
        return self._port

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        if self._thread is not None:
            self._thread.join()


class Observed(Protocol):
    """What the endpoint reads from the daemon (a ``supervisor.Daemon``); ``not_ready`` names
    what keeps it from serving pods (a resource not streaming, a view it cannot write)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def inventory(self) -> Inventory: ...
    @property
    def views(self) -> Mapping[str, ResourceView]: ...
    @property
    def registered(self) -> Set[str]: ...
    @property
    def expected_registrations(self) -> frozenset[str]: ...
    @property
    def counters(self) -> Counters: ...
    def alive(self) -> bool: ...
    def not_ready(self) -> list[str]: ...
    def queue_book(self) -> QueueBook: ...
    def api_requests(self) -> Mapping[str, int] | None: ...
    @property
    def vf_changes(self) -> tuple[VfChange, ...]: ...


def _probe(calls: LoopCalls, check: Callable[[], bool], ok: str, failed: str) -> Route:
    """A route answering 200 ``ok`` while ``check()`` (run on the loop) holds, 503 otherwise."""

    def route(headers: Headers) -> Response:
        try:
            passed = calls.call(check, LOOP_TIMEOUT)
        except (TimeoutError, RuntimeError):
            return text(503, "event loop not responding")
        return text(200, ok) if passed else text(503, failed)

    return route


def _readyz(calls: LoopCalls, daemon: Observed) -> Route:
    """200 "ready", or 503 naming everything ``not_ready()`` lists."""

    def route(headers: Headers) -> Response:
        try:
            missing = calls.call(daemon.not_ready, LOOP_TIMEOUT)
        except (TimeoutError, RuntimeError):
            return text(503, "event loop not responding")
        return text(503, f"not ready: {'; '.join(missing)}") if missing else text(200, "ready")

    return route


def with_node_facts(taken: Snapshot, sysfs_root: Path) -> Snapshot:
    """``taken`` with the node's KAE facts read now: on the endpoint's worker, not the loop."""
    return dataclasses.replace(taken, node_facts=read_node_facts(sysfs_root, taken.inventory))


def daemon_routes(
    daemon: Observed, source: AllocationsSource, calls: LoopCalls
) -> dict[str, Route]:
    """The endpoint's routes over a running daemon, whose loop ``calls`` reaches."""

    async def snapshot() -> Snapshot:
        holder = await source.fresh()  # asks the kubelet, unless an answer is a second old
        return Snapshot(
            daemon.inventory,
            daemon.views,
            frozenset(daemon.registered),
            holder.current,
            daemon.queue_book(),
            daemon.expected_registrations,
            daemon.api_requests(),
            vf_changes=daemon.vf_changes,
        )

    async def held() -> tuple[Allocations | None, str | None]:
        holder = await source.fresh()
        return holder.current, holder.problem

    def metrics(headers: Headers) -> Response:
        try:
            taken = calls.awaited(snapshot, LOOP_TIMEOUT + LIST_TIMEOUT)
        except (TimeoutError, RuntimeError):
            return text(503, "event loop not responding")
        taken = with_node_facts(taken, daemon.settings.sysfs_root)
        body, content_type = exposition(taken, daemon.counters, headers.get("accept", ""))
        return Response(200, content_type, body)

    def allocations(headers: Headers) -> Response:
        if daemon.settings.mode == "dra":  # the kubelet's pod-resources API lists no claims
            return Response(200, "application/json", json.dumps(DRA_ALLOCATIONS).encode())
        try:
            current, problem = calls.awaited(held, LOOP_TIMEOUT + LIST_TIMEOUT)
        except (TimeoutError, RuntimeError):
            return text(503, "event loop not responding")
        if current is None:
            payload: dict[str, object] = {"error": f"pod-resources API unavailable: {problem}"}
            return Response(503, "application/json", json.dumps(payload).encode())
        payload = {"allocations": [row.as_record() for row in current.rows]}
        return Response(200, "application/json", json.dumps(payload, indent=2).encode())

    return {
        "/metrics": metrics,
        "/healthz": _probe(calls, daemon.alive, "ok", "unhealthy: a daemon loop stopped ticking"),
        "/readyz": _readyz(calls, daemon),
        "/allocations": allocations,
    }


class EndpointTask:
    """The root task serving the endpoint; the pod-resources API is asked per scrape.

    ``bound`` is set (and ``port`` known) once listening, for tests that ask for port 0;
    ``source`` is the pod-resources source and ``calls`` the door to the loop once running.
    """

    def __init__(self, max_age: float = MAX_AGE) -> None:
        self.max_age = max_age  # of a pod-resources answer given again to the next scrape
        self.bound = threading.Event()
        self.port: int | None = None
        self.source: AllocationsSource | None = None
        self.calls: LoopCalls | None = None

    async def run(self, daemon: Observed) -> None:
        """Serve until cancelled; a bad or busy address is logged, never fatal (a bad one ends
        the task: there is nothing to serve)."""
        socket_path = daemon.settings.effective_pod_resources_socket
        source = self.source = AllocationsSource(socket_path, self.max_age)
        calls = self.calls = LoopCalls(asyncio.get_running_loop())
        endpoint = HttpEndpoint(daemon_routes(daemon, source, calls))
        try:
            if await self._listen(endpoint, daemon.settings.metrics_address):
                await asyncio.Future()  # serve until cancelled
        finally:
            try:
                # First, on the loop: a scrape still in a worker starts nothing here from now
                # on, and what scrapes started ends before the loop does (see loop_calls).
                await calls.close()
            finally:
                await asyncio.to_thread(endpoint.stop)

    async def _listen(self, endpoint: HttpEndpoint, address: str) -> bool:
        """Listen on ``address``, retrying while it is busy; False if it is not an address."""
        try:
            host, port = parse_address(address)
        except ValueError as err:
            log.error("metrics endpoint disabled: %s", err)
            return False
        last_error = ""
        while True:
            try:
                # On the loop: binding is quick, and a cancellation cannot land half-way.
                endpoint.start(host, port)
                break
            except OSError as err:
                if str(err) != last_error:
                    log.error(
                        "cannot listen on %s (%s); retrying every %gs", address, err, BIND_RETRY
                    )
                    last_error = str(err)
            await asyncio.sleep(BIND_RETRY)
        self.port = endpoint.port
        self.bound.set()
        log.info(
            "serving /metrics, /healthz, /readyz, /allocations on %s (port %d)", address, self.port
        )
        return True
