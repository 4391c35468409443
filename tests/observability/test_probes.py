"""/healthz and /readyz as the kubelet's probes see them, and the endpoint's HTTP basics."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kae_deviceplugin.config.rules import parse_address
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.core.model import Inventory, QueueBook
from kae_deviceplugin.core.vf_plan import VfChange
from kae_deviceplugin.core.views import ResourceView
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.kubelet.podresources import AllocationsSource
from kae_deviceplugin.observability import http
from kae_deviceplugin.observability.http import HttpEndpoint, daemon_routes
from kae_deviceplugin.observability.http_answer import parse_headers
from kae_deviceplugin.observability.loop_calls import LoopCalls
from tests.support.harness import DEADLINE
from tests.support.observability_harness import observed_node, wait_until

RESOURCES = {f"openfuyao.com/kae.{e}" for e in ("hpre", "sec", "zip")}
ABSENT_SOCKET = Path("/nonexistent/pod-resources/kubelet.sock")  # the kubelet has none here


def test_readyz_turns_ready_only_after_registration_and_not_while_the_kubelet_is_gone() -> None:
    """No kubelet: alive, not ready. Kubelet up: ready once all register. Kubelet gone: unready."""
    with observed_node(start_kubelet=False) as node:
        assert node.get("/healthz")[0] == 200
        assert node.get("/readyz")[0] == 503
        node.kubelet.start()
        assert wait_until(lambda: node.get("/readyz")[0] == 200)
        registered = {r.resource for r in node.kubelet.registrations}
        assert registered == RESOURCES  # ready implies every resource registered
        node.kubelet.stop()
        assert wait_until(lambda: node.get("/readyz")[0] == 503)
        assert node.get("/healthz")[0] == 200  # a missing kubelet is not our illness
        node.kubelet.start()
        assert wait_until(lambda: node.get("/readyz")[0] == 200)


def test_unknown_paths_are_404_and_head_works() -> None:
    """Anything but the four routes is 404; HEAD answers like GET without a body."""
    with observed_node() as node:
        status, content_type, _ = node.get("/nope")
        assert status == 404 and content_type.startswith("text/plain")
        request = urllib.request.Request(node.base_url + "/healthz", method="HEAD")
        with urllib.request.urlopen(request, timeout=DEADLINE) as answer:
            assert answer.status == 200 and answer.read() == b""
        assert node.get("/healthz?verbose=1")[0] == 200  # query strings are ignored


class FakeDaemon:
    """Just the surface the endpoint reads, with switchable probe answers."""

    def __init__(self) -> None:
        self.settings = Settings()
        self.inventory = Inventory()
        self.views: dict[str, ResourceView] = {}
        self.registered: set[str] = set()
        self.expected_registrations: frozenset[str] = frozenset()
        self.is_alive = True
        self.missing = ["openfuyao.com/kae.hpre not registered or not streaming"]
        self.counters = Counters()
        self.vf_changes: tuple[VfChange, ...] = ()

    def alive(self) -> bool:
        return self.is_alive

    def not_ready(self) -> list[str]:
        return self.missing

    def queue_book(self) -> QueueBook:
        return QueueBook()

    def api_requests(self) -> None:
        return None


@contextmanager
def serving(daemon: FakeDaemon) -> Iterator[tuple[str, asyncio.AbstractEventLoop]]:
    """The routes over ``daemon`` on a loop running in a thread; yields (base URL, loop)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    calls = LoopCalls(loop)
    endpoint = HttpEndpoint(daemon_routes(daemon, AllocationsSource(ABSENT_SOCKET), calls))
    endpoint.start("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{endpoint.port}", loop
    finally:
        # As EndpointTask does: the door closed, and what scrapes started (a timed-out one's
        # task) ended, before the loop stops, so that the loop is closed with nothing pending.
        asyncio.run_coroutine_threadsafe(calls.close(), loop).result(DEADLINE)
        endpoint.stop()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(DEADLINE)
        loop.close()


def get_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=DEADLINE) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_probes_report_what_the_daemon_says() -> None:
    """/healthz follows alive(), /readyz follows not_ready(), read fresh on every request."""
    daemon = FakeDaemon()
    with serving(daemon) as (url, _):
        assert (get_status(url + "/healthz"), get_status(url + "/readyz")) == (200, 503)
        daemon.missing = []
        daemon.is_alive = False
        assert (get_status(url + "/healthz"), get_status(url + "/readyz")) == (503, 200)


def test_readyz_names_what_is_not_ready() -> None:
    """A 503 from /readyz names every resource or file that keeps the node from serving pods."""
    daemon = FakeDaemon()
    daemon.missing = ["openfuyao.com/kae.sec not registered or not streaming", "view: EROFS"]
    with serving(daemon) as (url, _):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(url + "/readyz", timeout=DEADLINE)
        body = caught.value.read().decode()
    assert body.strip() == (
        "not ready: openfuyao.com/kae.sec not registered or not streaming; view: EROFS"
    )


def test_a_wedged_event_loop_fails_the_liveness_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the loop cannot run a callback in time, /healthz and /metrics say 503, not 200."""
    monkeypatch.setattr(http, "LOOP_TIMEOUT", 0.2)
    daemon = FakeDaemon()
    release = threading.Event()
    with serving(daemon) as (url, loop):
        loop.call_soon_threadsafe(release.wait, DEADLINE)  # blocks the loop like a stuck call
        try:
            assert get_status(url + "/healthz") == 503
            assert get_status(url + "/metrics") == 503
        finally:
            release.set()
        assert wait_until(lambda: get_status(url + "/healthz") == 200)


def test_allocations_route_is_503_json_while_unknown() -> None:
    """Before any pod-resources answer /allocations says why, as JSON, with 503."""
    with serving(FakeDaemon()) as (url, _):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(url + "/allocations", timeout=DEADLINE)
        assert caught.value.code == 503
        assert "error" in json.loads(caught.value.read())


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (":9410", ("", 9410)),
        ("0.0.0.0:9410", ("0.0.0.0", 9410)),
        ("[::]:9410", ("::", 9410)),
        ("[::1]:0", ("::1", 0)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("localhost:65535", ("localhost", 65535)),
    ],
)
def test_metrics_address_forms(address: str, expected: tuple[str, int]) -> None:
    """Every documented --metrics-address form parses to (host, port); "" host = all."""
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["9410", "::9410", "[::]", "host:", ":65536", ":-1", "[]:1"])
def test_bad_metrics_addresses_are_rejected(address: str) -> None:
    """Malformed addresses raise ValueError naming the address (for config validation)."""
    with pytest.raises(ValueError, match=re.escape(repr(address))):
        parse_address(address)


def test_all_interfaces_address_listens_on_ipv4_loopback() -> None:
    """`:PORT` binds every interface: reachable over IPv4 (and IPv6 where the host has it)."""
    daemon = FakeDaemon()
    loop = asyncio.new_event_loop()
    endpoint = HttpEndpoint(
        daemon_routes(daemon, AllocationsSource(ABSENT_SOCKET), LoopCalls(loop))
    )
    endpoint.start("", 0)
    try:
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=DEADLINE):
            pass
    finally:
        endpoint.stop()
        loop.close()


def test_a_busy_port_is_logged_once_and_does_not_stop_the_daemon(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The address is taken: one error line, the daemon keeps serving the kubelet."""
    caplog.set_level(logging.INFO, logger="kae_deviceplugin.observability.http")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with observed_node(metrics_address=f"127.0.0.1:{port}") as node:
            assert node.wait_registered(3)
            assert wait_until(lambda: "cannot listen" in caplog.text)
            assert not node.endpoint.bound.is_set()
            assert node.runner.alive
    assert caplog.text.count("cannot listen") == 1


def test_request_headers_parse_as_http_client_reads_them() -> None:
    """Names in lower case, the first of a repeated field, folded lines joined, lines without a
    colon skipped, parsing stops at the blank line; over 100 fields is refused (None)."""
    block = (
        b"Host: x\r\nAccept: application/openmetrics-text;\r\n version=1.0.0\r\n"
        b"accept: text/plain\r\nno colon here\r\nX-Empty:\r\n\r\nAfter: body\r\n"
    )
    assert parse_headers(block) == {
        "host": "x",
        "accept": "application/openmetrics-text; version=1.0.0",
        "x-empty": "",
    }
    assert parse_headers(b"") == {}
    assert parse_headers(b"Accept: a\x0cb\nX: y\n\n") == {"accept": "a\x0cb", "x": "y"}
    assert parse_headers(b"X: y\r\n" * 100 + b"\r\n") == {"x": "y"}
    assert parse_headers(b"X: y\r\n" * 101 + b"\r\n") is None
