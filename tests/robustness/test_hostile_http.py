"""The HTTP endpoint under attack: slowloris, a connection flood, the open-file limit reached.

What must hold: /healthz answers within 1 s (the kubelet's liveness probe restarts the pod
otherwise), the kubelet's gRPC keeps working, the endpoint's threads and descriptors stay
bounded, and at rest the endpoint does not wake at all. Loopback only; every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc

from kae_deviceplugin.api import pb, pb_grpc
from kae_deviceplugin.observability.http import HttpEndpoint
from kae_deviceplugin.observability.http_answer import Response
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import DEADLINE, short_tmpdir
from tests.support.observability_harness import observed_node, wait_until

HPRE = "openfuyao.com/kae.hpre"
SLOW_CONNECTIONS = 1000
PROBE_TIMEOUT = 1.0  # the answer /healthz owes the kubelet's liveness probe


def healthz(port: int) -> int:
    url = f"http://127.0.0.1:{port}/healthz"
    with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT) as answer:
        return int(answer.status)


@contextlib.contextmanager
def slowloris(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections that each send half a request head and then stall."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            client.settimeout(PROBE_TIMEOUT)
            try:
                client.connect(("127.0.0.1", port))
                client.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            except OSError:
                pass  # refused or reset by a bounded server: exactly what it may do
            sockets.append(client)
        yield sockets
    finally:
        for client in sockets:
            client.close()


def trickle(sockets: list[socket.socket]) -> None:
    """One more byte on each stalled connection, as a slowloris does to beat a read timeout."""
    for client in sockets:
        with contextlib.suppress(OSError):
            client.send(b"a")


def test_healthz_answers_within_a_second_under_a_thousand_slow_connections() -> None:
    """1,000 stalled request heads: /healthz is 200 within 1 s, Allocate works, and the
    process keeps a bounded number of threads (not one per connection)."""
    with observed_node("kunpeng920-2p") as node:
        assert node.wait_registered()
        port = int(node.base_url.rsplit(":", 1)[1])
        threads_before = threading.active_count()
        with slowloris(port, SLOW_CONNECTIONS) as sockets:
            trickle(sockets)
            assert healthz(port) == 200
            assert threading.active_count() - threads_before < 16
            assert node.kubelet.allocate(HPRE, ["0000:79:00.0"]).container_responses
            trickle(sockets)
            assert healthz(port) == 200


def test_a_request_head_that_never_ends_is_cut_off() -> None:
    """A client sending a header line now and then is disconnected after the read deadline,
    however often it sends: the server closes its end (recv sees EOF or a reset)."""
    with observed_node("kunpeng920-2p") as node:
        port = int(node.base_url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as client:
            client.send(b"GET /metrics HTTP/1.1\r\n")
            deadline = time.monotonic() + 2 * DEADLINE
            closed = False
            while not closed and time.monotonic() < deadline:
                try:
                    client.send(b"X-Slow: 1\r\n")
                    client.settimeout(1.0)
                    closed = client.recv(1) == b""
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
            assert closed, "a never-ending request head kept its connection"


def voluntary_switches(native_id: int) -> int:
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    match = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.MULTILINE)
    assert match is not None
    return int(match.group(1))


def test_the_endpoint_does_not_wake_at_rest() -> None:
    """Idle for half a second, the serving thread does not wake (it used to poll at 10 Hz)."""
    endpoint = HttpEndpoint({})
    endpoint.start("127.0.0.1", 0)
    try:
        (serving,) = [t for t in threading.enumerate() if t.name == "http"]
        assert serving.native_id is not None
        native_id = serving.native_id
        assert wait_until(lambda: voluntary_switches(native_id) > 0)

        # Settled: the start-up's last wakes are over once 0.1 s passes without one (on a busy
        # machine the thread reaches its idle wait late; measuring from then is what counts).
        def settled() -> bool:
            now = voluntary_switches(native_id)
            threading.Event().wait(0.1)
            return voluntary_switches(native_id) == now

        assert wait_until(settled)
        before = voluntary_switches(native_id)
        threading.Event().wait(0.5)  # the interval observed, not a wait for something to happen
        assert voluntary_switches(native_id) - before <= 1
    finally:
        endpoint.stop()


FD_LIMIT = 256


# Lowers the limit (soft and hard, so the daemon cannot raise it back) and becomes `serve`.
LIMITED = (
    "import os, resource, sys; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({FD_LIMIT}, {FD_LIMIT})); "
    "os.execv(sys.executable, [sys.executable, '-m', 'kae_deviceplugin', 'serve', *sys.argv[1:]])"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextlib.contextmanager
def serve_with_fd_limit(workdir: Path) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    """`serve` limited to FD_LIMIT descriptors; yields (process, HTTP port, socket dir)."""
    TREES["kunpeng920-2p"].build(workdir / "node")
    plugin_dir = workdir / "kubelet" / "device-plugins"
    command = [sys.executable, "-c", LIMITED]
    command += ["--sysfs-root", str(workdir / "node" / "sys")]
    command += ["--dev-root", str(workdir / "node" / "dev")]
    command += ["--kubelet-root", str(workdir / "kubelet"), "--registration", "kubelet-socket"]
    command += ["--state-dir", str(workdir / "state"), "--nfd-features-file", ""]
    command += ["--metrics-address", f"127.0.0.1:{free_port()}"]
    log = (workdir / "serve.log").open("w+")
    child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:

        def port() -> int | None:
            found = re.search(r"\(port (\d+)\)", (workdir / "serve.log").read_text())
            return int(found.group(1)) if found else None

        bound = wait_until(port)
        assert bound, (workdir / "serve.log").read_text()
        yield child, bound, plugin_dir
    finally:
        child.terminate()
        try:
            child.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        log.close()


def test_healthz_and_grpc_keep_working_with_the_open_file_limit_reached() -> None:
    """In a daemon limited to 256 descriptors: 1,000 stalled HTTP connections leave room for a
    new gRPC connection; then unix connections flood it to the very limit (EMFILE), and still
    /healthz answers within 1 s and the kubelet's connection allocates."""
    with short_tmpdir() as workdir:
        kubelet = KubeletEmulator(workdir / "kubelet" / "device-plugins", dial_timeout=5.0)
        kubelet.start()
        try:
            with serve_with_fd_limit(workdir) as (child, port, plugin_dir):
                assert kubelet.wait_for(lambda k: len(k.resources()) == 3, DEADLINE)
                with slowloris(port, SLOW_CONNECTIONS) as sockets:
                    trickle(sockets)
                    assert healthz(port) == 200
                    assert fresh_grpc_call(plugin_dir / "kae-hpre.sock")
                    with flood_unix(plugin_dir / "kae-hpre.sock", FD_LIMIT):
                        assert wait_until(lambda: open_fds(child.pid) >= FD_LIMIT - 1)
                        assert healthz(port) == 200
                        assert healthz(port) == 200
                        assert kubelet.allocate(HPRE, ["0000:79:00.0"]).container_responses
                assert child.poll() is None, "the daemon died"
        finally:
            kubelet.stop()


def fresh_grpc_call(socket_path: Path) -> bool:
    with grpc.insecure_channel(f"unix://{socket_path}") as channel:
        stub = pb_grpc.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(pb.Empty(), timeout=DEADLINE)
        return bool(options.get_preferred_allocation_available)


@contextlib.contextmanager
def flood_unix(socket_path: Path, count: int) -> Iterator[None]:
    """``count`` idle connections to a plugin socket: each costs the daemon a descriptor."""
    clients: list[socket.socket] = []
    try:
        for _ in range(count):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(PROBE_TIMEOUT)
            with contextlib.suppress(OSError):
                client.connect(str(socket_path))
            clients.append(client)
        yield
    finally:
        for client in clients:
            client.close()


def raw_status(port: int, request: bytes) -> int:
    """The status code of the answer to ``request`` sent as is; 0 when the server just closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as client:
        with contextlib.suppress(OSError):
            client.sendall(request)
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := client.recv(4096):
                answer += chunk
    found = re.match(rb"HTTP/1\.[01] (\d{3}) ", answer)
    return int(found.group(1)) if found else 0


def test_garbage_requests_get_clean_answers() -> None:
    """An oversized head, a garbage request line, a POST and too many headers: 431, 400, 405,
    400; the endpoint keeps answering /healthz."""
    endpoint = HttpEndpoint({"/healthz": lambda headers: Response(200, "text/plain", b"ok\n")})
    endpoint.start("127.0.0.1", 0)
    try:
        port = endpoint.port
        huge = b"GET / HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n"
        assert raw_status(port, huge) == 431
        assert raw_status(port, b"\x00\xff garbage\r\n\r\n") == 400
        assert raw_status(port, b"POST /healthz HTTP/1.1\r\n\r\n") == 405
        many = b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n"
        assert raw_status(port, many) == 400
        assert raw_status(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") == 200
        assert healthz(port) == 200
    finally:
        endpoint.stop()
