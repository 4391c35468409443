"""A BoundedHttpServer on a thread with a scripted answer function, and raw TCP clients of it.

Loopback only; every blocking call is bounded by DEADLINE.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
from collections.abc import Iterator

from kae_deviceplugin.observability import http_server, http_wire
from kae_deviceplugin.observability.http_server import BoundedHttpServer

DEADLINE = 10.0
OK = http_wire.plain_response(200, "OK", b"ok\n", "text/plain")
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


class Answers:
    """The answer function: records every head it is given; holds answers while ``gate`` is
    closed; answers /big with a large body and /boom by raising."""

    def __init__(self, big: int = 0) -> None:
        self.heads: list[bytes] = []
        self.called = threading.Condition()
        self.gate = threading.Event()
        self.gate.set()
        self.big = b"x" * big

    def __call__(self, head: bytes) -> bytes:
        with self.called:
            self.heads.append(head)
            self.called.notify_all()
        assert self.gate.wait(DEADLINE)
        if head.startswith(b"GET /boom "):
            raise RuntimeError("boom")
        if head.startswith(b"GET /big "):
            return http_wire.plain_response(200, "OK", self.big, "text/plain")
        return OK

    def wait_for_calls(self, count: int) -> bool:
        with self.called:
            return self.called.wait_for(lambda: len(self.heads) >= count, DEADLINE)


@dataclasses.dataclass
class Running:
    """A server serving on its own thread, and the port it listens on."""

    server: BoundedHttpServer
    port: int
    thread: threading.Thread

    def stop(self) -> None:
        """stop(), then wait (within DEADLINE) for serve() to return."""
        self.server.stop()
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "serve() did not return after stop()"


@contextlib.contextmanager
def serving(answers: Answers, max_connections: int = 4) -> Iterator[Running]:
    """The server on a thread, as HttpEndpoint runs it; stopped on the way out."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=http_server.BACKLOG)
    server = BoundedHttpServer(listener, answers, max_connections)
    thread = threading.Thread(target=server.serve, name="http-test", daemon=True)
    thread.start()
    running = Running(server, int(listener.getsockname()[1]), thread)
    try:
        yield running
    finally:
        answers.gate.set()
        running.stop()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)


def read_all(client: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset after the data counts as closed)."""
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := client.recv(65536):
            data += chunk
    return data


def exchange(port: int, request: bytes) -> bytes:
    with connect(port) as client:
        with contextlib.suppress(OSError):  # a server that already answered may reset a send
            client.sendall(request)
        return read_all(client)


def closed_without_answer(client: socket.socket) -> bool:
    """Whether the server closed ``client`` without a byte of answer (within DEADLINE)."""
    try:
        return client.recv(1) == b""
    except ConnectionResetError:
        return True


def stalled_writer(port: int, answers: Answers) -> socket.socket:
    """A client that asks for /big and then reads nothing, once its answer is being computed."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before the handshake
    client.settimeout(DEADLINE)
    client.connect(("127.0.0.1", port))
    client.sendall(b"GET /big HTTP/1.1\r\n\r\n")
    assert answers.wait_for_calls(1)
    return client
