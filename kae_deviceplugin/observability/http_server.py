"""A small HTTP/1.1 server with hard bounds, for probes and scrapes that must answer under attack.

Why not ``ThreadingHTTPServer``: one thread per connection, no deadline for a request that
trickles in a header every few seconds (slowloris), a listen backlog of 5, an accept loop that
spins on EMFILE, and ``serve_forever`` waking 10 times a second to look for a shutdown. Here:

* one thread does all socket I/O without blocking (a selector); it sleeps until a socket is
  ready, a deadline is due or ``stop()`` writes to a wake-up socketpair, so at rest it never wakes;
* a request head must arrive whole within ``READ_DEADLINE`` and fit in ``MAX_HEAD`` bytes, and
  an answer must be taken within ``WRITE_DEADLINE``, or the connection is closed;
* at most ``max_connections`` connections are open; one more evicts the oldest connection still
  sending its head (an attacker's stalled ones, never a request being answered), so a probe's
  fresh connection always gets in;
* out of file descriptors, it frees one: it evicts the oldest stalled connection, or uses a spare
  descriptor kept for that moment, else stops accepting for ``ACCEPT_BACKOFF`` instead of spinning;
* answers are computed by a few worker threads (they wait for the daemon's event loop), handed
  back and written by the I/O thread; each connection carries one request (``Connection: close``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import logging
import os
import queue
import resource
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kae_deviceplugin.observability.http_wire import INTERNAL_ERROR, TOO_LARGE

log = logging.getLogger(__name__)

BACKLOG = 128
MAX_CONNECTIONS = 64  # far more than scrapes and probes need at once
MAX_HEAD = 16 * 1024
READ_DEADLINE = 5.0
WRITE_DEADLINE = 10.0
WORKERS = 2
ACCEPT_BACKOFF = 0.25
ACCEPTS_PER_WAKE = 64
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

Answer = Callable[[bytes], bytes]  # a whole request head -> a whole response


def connection_cap() -> int:
    """``MAX_CONNECTIONS``, or an eighth of the open-file limit when that is smaller: the
    endpoint must never be what exhausts the descriptors gRPC and discovery need."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(4, min(MAX_CONNECTIONS, soft // 8))


@dataclass(eq=False)
class _Connection:
    sock: socket.socket
    deadline: float
    head: bytearray = field(default_factory=bytearray)
    outgoing: memoryview | None = None
    working: bool = False


def _head_end(buffer: bytearray, searched_from: int) -> int:
    """Index just past the blank line ending a request head, or -1."""
    start = max(0, searched_from - 3)
    # The first blank line, whichever line ending it has: a later one may be a pipelined request.
    ends = [at + len(m) for m in (b"\r\n\r\n", b"\n\n") if (at := buffer.find(m, start)) >= 0]
    return min(ends, default=-1)


class SpareDescriptor:
    """One descriptor held in reserve, given up when the process runs out of them so that an
    accept can still succeed (and a stalled client be closed), and taken back afterwards."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.restore()

    def restore(self) -> None:
        if self.fd is None:
            with contextlib.suppress(OSError):
                self.fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    def release(self) -> bool:
        """Give the descriptor back to the process; False if none was held."""
        fd, self.fd = self.fd, None
        if fd is None:
            return False
        os.close(fd)
        return True


class BoundedHttpServer:
    """Serves ``answer`` on an already bound ``listener`` until ``stop()``; see the module."""

    def __init__(self, listener: socket.socket, answer: Answer, max_connections: int) -> None:
        self.listener = listener
        self.answer = answer
        self.max_connections = max_connections
        listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._done: queue.SimpleQueue[tuple[_Connection, bytes]] = queue.SimpleQueue()
        self._workers = concurrent.futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="http")
        self._connections: dict[socket.socket, _Connection] = {}  # in accept order
        self._spare = SpareDescriptor()
        self._accept_paused_until: float | None = None
        self._stopping = False

    # -- the I/O thread ------------------------------------------------------------------------

    def serve(self) -> None:
        self._selector.register(self.listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._stopping:
                for key, mask in self._selector.select(self._timeout()):
                    if key.fileobj is self._wake_r:
                        self._drain_wakeups()
                    elif key.fileobj is self.listener:
                        self._accept()
                    elif isinstance(key.data, _Connection):
                        self._on_ready(key.data, mask)
                self._expire(time.monotonic())
                self._spare.restore()  # given up for an accept: take it back when fds allow
        finally:
            self._close_all()

    def stop(self) -> None:
        """Ask the serving thread to end (it closes every socket); safe from any thread."""
        self._stopping = True
        self._wake()

    def _timeout(self) -> float | None:
        """Until the nearest deadline; None (sleep until something happens) when none is set."""
        deadlines = [c.deadline for c in self._connections.values() if not c.working]
        if self._accept_paused_until is not None:
            deadlines.append(self._accept_paused_until)
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _expire(self, now: float) -> None:
        for connection in [c for c in self._connections.values() if not c.working]:
            if connection.deadline <= now:
                self._close(connection)
        if self._accept_paused_until is not None and self._accept_paused_until <= now:
            self._accept_paused_until = None
            self._selector.register(self.listener, selectors.EVENT_READ)

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                if err.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue
                if err.errno in _OUT_OF_FDS and self._free_a_descriptor():
                    continue
                self._pause_accepting(err)
                return
            self._admit(sock)

    def _free_a_descriptor(self) -> bool:
        """Out of descriptors: evict a stalled connection or give up the spare. False if neither."""
        return self._evict_oldest_reader() or self._spare.release()

    def _pause_accepting(self, err: OSError) -> None:
        log.warning("metrics endpoint: accept failed (%s); pausing accepts", err.strerror)
        self._selector.unregister(self.listener)
        self._accept_paused_until = time.monotonic() + ACCEPT_BACKOFF

    def _admit(self, sock: socket.socket) -> None:
        if len(self._connections) >= self.max_connections and not self._evict_oldest_reader():
            sock.close()  # every slot is answering a request: the newcomer must go
            return
        sock.setblocking(False)
        connection = _Connection(sock, time.monotonic() + READ_DEADLINE)
        self._connections[sock] = connection
        self._selector.register(sock, selectors.EVENT_READ, connection)
        self._read(connection)  # a probe's request has usually arrived with the connection

    def _evict_oldest_reader(self) -> bool:
        for connection in self._connections.values():
            if not connection.working and connection.outgoing is None:
                self._close(connection)
                return True
        return False

    def _on_ready(self, connection: _Connection, mask: int) -> None:
        if connection.outgoing is not None:
            self._write(connection)
        elif mask & selectors.EVENT_READ:
            self._read(connection)

    def _read(self, connection: _Connection) -> None:
        try:
            chunk = connection.sock.recv(MAX_HEAD + 1 - len(connection.head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close(connection)
            return
        searched = len(connection.head)
        connection.head += chunk
        end = _head_end(connection.head, searched)
        if end < 0 or end > MAX_HEAD:  # a head must fit in MAX_HEAD bytes, its end included
            if len(connection.head) > MAX_HEAD:
                self._respond(connection, TOO_LARGE)
            return
        connection.working = True
        self._selector.unregister(connection.sock)  # nothing to do with it until answered
        self._workers.submit(self._work, connection, bytes(connection.head[:end]))

    def _work(self, connection: _Connection, head: bytes) -> None:
        """On a worker thread: compute the answer and hand it back to the I/O thread."""
        try:
            response = self.answer(head)
        except Exception:
            log.exception("metrics endpoint: answering a request failed")
            response = INTERNAL_ERROR
        self._done.put((connection, response))
        self._wake()

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while self._wake_r.recv(4096):
                pass
        while True:
            try:
                connection, response = self._done.get_nowait()
            except queue.Empty:
                return
            if connection.sock in self._connections:
                connection.working = False
                self._respond(connection, response)

    def _respond(self, connection: _Connection, response: bytes) -> None:
        connection.outgoing = memoryview(response)
        connection.deadline = time.monotonic() + WRITE_DEADLINE
        if connection.sock in self._selector.get_map():
            self._selector.modify(connection.sock, selectors.EVENT_WRITE, connection)
        else:
            self._selector.register(connection.sock, selectors.EVENT_WRITE, connection)
        self._write(connection)

    def _write(self, connection: _Connection) -> None:
        assert connection.outgoing is not None
        try:
            sent = connection.sock.send(connection.outgoing)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(connection)
            return
        connection.outgoing = connection.outgoing[sent:]
        if not connection.outgoing:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_WR)
            self._close(connection)

    def _close(self, connection: _Connection) -> None:
        if self._connections.pop(connection.sock, None) is None:
            return
        if connection.sock in self._selector.get_map():
            self._selector.unregister(connection.sock)
        connection.sock.close()

    def _close_all(self) -> None:
        for connection in list(self._connections.values()):
            self._close(connection)
        self._workers.shutdown(wait=False, cancel_futures=True)
        self._selector.close()
        self.listener.close()
        self._wake_r.close()
        self._wake_w.close()
        self._spare.release()

    # -- helpers ---------------------------------------------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed
            self._wake_w.send(b"\0")
