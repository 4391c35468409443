"""BoundedHttpServer on its own: its connection cap, head size limit, deadlines and stop().

Real TCP sockets on 127.0.0.1 (port 0), the server on a thread as HttpEndpoint runs it, and an
answer function of the test's own. Deadlines are shortened through the module constants the
server reads on each connection; every wait is bounded by DEADLINE.
"""

from __future__ import annotations

import resource
import socket
import threading
import time

import pytest

from kae_deviceplugin.observability import http_server, http_wire
from kae_deviceplugin.observability.http_server import BoundedHttpServer, connection_cap
from tests.support.http_client import (
    DEADLINE,
    OK,
    REQUEST,
    Answers,
    closed_without_answer,
    connect,
    exchange,
    read_all,
    serving,
    stalled_writer,
)

SHORT = 0.2  # the read and write deadlines where a test waits for one to pass
BIG = 16 * 1024 * 1024  # several times what the kernel lets a socket buffer (tcp_wmem)


def status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else 0


def test_one_request_one_answer_then_close() -> None:
    """The answer gets the whole head, terminator included; the client reads the response
    and then the server's close; bare-LF line endings are accepted too."""
    answers = Answers()
    with serving(answers) as http:
        assert exchange(http.port, REQUEST) == OK
        assert exchange(http.port, b"GET / HTTP/1.1\n\n") == OK
    assert answers.heads == [REQUEST, b"GET / HTTP/1.1\n\n"]


def test_a_head_sent_byte_by_byte_is_answered_once_whole() -> None:
    """Sent one byte per segment, the head (and its terminator split across reads) still
    reaches the answer whole and exactly once."""
    answers = Answers()
    with serving(answers) as http, connect(http.port) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in REQUEST:
            client.send(bytes([byte]))
        assert read_all(client) == OK
    assert answers.heads == [REQUEST]


@pytest.mark.parametrize("first", [b"GET /a HTTP/1.1\r\n\r\n", b"GET /a HTTP/1.1\n\n"])
def test_pipelined_requests_get_only_the_first_answered(first: bytes) -> None:
    """Two requests in one segment: one answer, for the first head only (the answer never
    sees the second request, whatever line endings the first used), then the close."""
    answers = Answers()
    with serving(answers) as http:
        assert exchange(http.port, first + b"GET /b HTTP/1.1\r\n\r\n") == OK
    assert answers.heads == [first]


def test_keep_alive_is_not_kept() -> None:
    """A client asking for keep-alive is told Connection: close and the connection ends."""
    with serving(Answers()) as http:
        response = exchange(http.port, b"GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n")
    assert b"\r\nConnection: close\r\n" in response
    assert status(response) == 200


def test_an_answer_that_raises_is_a_500_and_the_server_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failing answer function gives 500 with its traceback logged; the next request works."""
    with serving(Answers()) as http:
        assert exchange(http.port, b"GET /boom HTTP/1.1\r\n\r\n") == http_wire.INTERNAL_ERROR
        assert exchange(http.port, REQUEST) == OK
    assert "answering a request failed" in caplog.text
    assert "RuntimeError: boom" in caplog.text


def head_of(size: int) -> bytes:
    """A request head of exactly ``size`` bytes, terminator included."""
    start, end = b"GET / HTTP/1.1\r\nX-Pad: ", b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


def test_a_head_of_max_head_bytes_fits_and_one_more_does_not() -> None:
    """MAX_HEAD bytes is answered; one byte more, or more without an end, is 431, unanswered."""
    answers = Answers()
    with serving(answers) as http:
        assert exchange(http.port, head_of(http_server.MAX_HEAD)) == OK
        assert exchange(http.port, head_of(http_server.MAX_HEAD + 1)) == http_wire.TOO_LARGE
        endless = b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * 20_000
        assert exchange(http.port, endless) == http_wire.TOO_LARGE
    assert [len(head) for head in answers.heads] == [http_server.MAX_HEAD]


def test_a_silent_client_is_dropped_after_the_read_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client that connects and sends nothing is closed once READ_DEADLINE passes."""
    monkeypatch.setattr(http_server, "READ_DEADLINE", SHORT)
    answers = Answers()
    with serving(answers) as http, connect(http.port) as client:
        assert closed_without_answer(client)
        assert exchange(http.port, REQUEST) == OK  # the server itself carries on
    assert answers.heads == [REQUEST]


def test_a_trickling_client_is_dropped_though_it_keeps_sending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Header bytes sent steadily do not extend the read deadline: the head must arrive
    whole in time, so a slowloris is cut off while still sending."""
    monkeypatch.setattr(http_server, "READ_DEADLINE", SHORT)
    with serving(Answers()) as http, connect(http.port) as client:
        client.sendall(b"GET / HTTP/1.1\r\n")
        client.settimeout(SHORT / 4)  # how often a byte is sent: well inside the deadline
        closed = False
        for _ in range(int(DEADLINE / (SHORT / 4))):
            try:
                client.send(b"X")
                closed = client.recv(1) == b""
            except TimeoutError:
                continue
            except OSError:
                closed = True
            if closed:
                break
        assert closed, "a trickling head kept its connection"


def test_the_oldest_stalled_reader_makes_room_for_a_new_connection() -> None:
    """At the cap (2), a new connection evicts the oldest connection still sending its head;
    the newer stalled one stays and can still finish its request."""
    answers = Answers()
    with serving(answers, max_connections=2) as http, connect(http.port) as oldest:
        oldest.sendall(b"GET / HTTP/1.1\r\n")
        with connect(http.port) as newer:  # accepted after ``oldest``: the listen queue is FIFO
            newer.sendall(b"GET / HTTP/1.1\r\n")
            assert exchange(http.port, REQUEST) == OK
            assert closed_without_answer(oldest)
            newer.sendall(b"\r\n")
            assert read_all(newer) == OK


def test_connections_being_answered_are_never_evicted() -> None:
    """At the cap with every connection waiting for its answer, a newcomer is turned away,
    and the answers still arrive whole once computed."""
    answers = Answers()
    answers.gate.clear()
    with (
        serving(answers, max_connections=2) as http,
        connect(http.port) as first,
        connect(http.port) as second,
    ):
        first.sendall(REQUEST)
        second.sendall(REQUEST)
        assert answers.wait_for_calls(2)
        with connect(http.port) as newcomer:
            assert closed_without_answer(newcomer)
        answers.gate.set()
        assert read_all(first) == OK
        assert read_all(second) == OK


def probe_until_answered(port: int) -> bytes:
    """Send a request every SHORT / 4 until one is answered (or DEADLINE passes): the slot
    frees at a moment the test cannot observe, only its effect."""
    deadline = time.monotonic() + DEADLINE
    pause = threading.Event()
    while not (answered := exchange(port, REQUEST)) and time.monotonic() < deadline:
        pause.wait(SHORT / 4)
    return answered


def test_a_connection_being_written_is_not_evicted() -> None:
    """An answer larger than the socket buffers, to a client that does not read: within the
    write deadline (10 s here) its slot is not taken from it, so the cap turns a probe away."""
    answers = Answers(big=BIG)
    with (
        serving(answers, max_connections=1) as http,
        stalled_writer(http.port, answers),
        connect(http.port) as probe,
    ):
        probe.sendall(REQUEST)
        assert closed_without_answer(probe)


def test_a_client_that_never_reads_is_dropped_after_the_write_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same stalled reader with a short WRITE_DEADLINE: the server drops it with the
    answer half sent, and a probe waiting for the one slot gets in."""
    monkeypatch.setattr(http_server, "WRITE_DEADLINE", SHORT)
    answers = Answers(big=BIG)
    with (
        serving(answers, max_connections=1) as http,
        stalled_writer(http.port, answers) as stalled,
    ):
        assert probe_until_answered(http.port) == OK
        assert len(read_all(stalled)) < BIG


def test_stop_closes_every_connection_and_the_listener() -> None:
    """stop() with a stalled reader and a request being answered: serve() returns, both
    clients see the close, and the port no longer accepts connections."""
    answers = Answers()
    answers.gate.clear()
    with serving(answers) as http, connect(http.port) as reader, connect(http.port) as asking:
        reader.sendall(b"GET / HTTP/1.1\r\n")
        asking.sendall(REQUEST)
        assert answers.wait_for_calls(1)
        http.stop()  # returns once serve() has returned
        assert closed_without_answer(reader)
        assert closed_without_answer(asking)
        with pytest.raises(ConnectionRefusedError):
            connect(http.port).close()


def test_stop_before_serve_makes_serve_return_at_once() -> None:
    """A stop() that comes before the thread runs serve() is not lost: serve() returns."""
    listener = socket.create_server(("127.0.0.1", 0))
    server = BoundedHttpServer(listener, Answers(), 4)
    server.stop()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    thread.join(DEADLINE)
    assert not thread.is_alive()
    assert listener.fileno() == -1  # closed by serve() on its way out


def test_many_clients_at_once_are_all_answered() -> None:
    """Thirty clients connected together, sending together: thirty answers."""
    answers = Answers()
    with serving(answers, max_connections=64) as http:
        clients = [connect(http.port) for _ in range(30)]
        try:
            for client in clients:
                client.sendall(REQUEST)
            assert [read_all(client) for client in clients] == [OK] * 30
        finally:
            for client in clients:
                client.close()
    assert len(answers.heads) == 30


@pytest.mark.parametrize(("soft", "cap"), [(16, 4), (256, 32), (1024, 64)])
def test_connection_cap_is_an_eighth_of_the_open_file_limit(soft: int, cap: int) -> None:
    """An eighth of the soft RLIMIT_NOFILE, at least 4 and at most MAX_CONNECTIONS."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    if before[1] != resource.RLIM_INFINITY and before[1] < soft:
        pytest.skip(f"hard open-file limit {before[1]} is below {soft}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, before[1]))
    try:
        found = connection_cap()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)
    assert found == cap
