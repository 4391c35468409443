"""kubelet.dial: a new channel dials the socket afresh instead of reusing an old connection."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from kae_deviceplugin.kubelet.dial import OWN_CONNECTION, unix_target

READY_WAIT = 0.5  # the listener speaks no HTTP/2, so no channel ever gets ready


@contextmanager
def counting_listener(path: Path) -> Iterator[list[socket.socket]]:
    """A unix listener that accepts and keeps every connection; the list grows with each."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield accepted
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()


def _dial_twice(path: Path, options: list[tuple[str, int]]) -> None:
    """Two channels to ``path``, open at once, each asked to connect."""
    first = grpc.insecure_channel(unix_target(path), options=options)
    second = grpc.insecure_channel(unix_target(path), options=options)
    try:
        for channel in (first, second):
            with pytest.raises(grpc.FutureTimeoutError):
                grpc.channel_ready_future(channel).result(timeout=READY_WAIT)
    finally:
        first.close()
        second.close()


def _wait_for(accepted: list[socket.socket], count: int, deadline: float = 2.0) -> None:
    """Until ``count`` connections came or ``deadline`` seconds passed (the control waits it
    out: it shows that a second connection does not come)."""
    tick = threading.Event()
    end = time.monotonic() + deadline
    while len(accepted) < count and time.monotonic() < end:
        tick.wait(0.02)


def test_each_channel_opens_its_own_connection(tmp_path: Path) -> None:
    """Two channels to one socket make two connections: neither borrows the other's, which
    could be to a server since replaced at that path."""
    path = tmp_path / "kubelet.sock"
    with counting_listener(path) as accepted:
        _dial_twice(path, [OWN_CONNECTION])
        _wait_for(accepted, 2)
        assert len(accepted) == 2


def test_without_it_grpc_shares_one_connection(tmp_path: Path) -> None:
    """The control: gRPC's default pool gives both channels one connection, the reuse that
    made a channel to a restarted server fail with "Stream removed (Broken pipe)"."""
    path = tmp_path / "kubelet.sock"
    with counting_listener(path) as accepted:
        _dial_twice(path, [])
        _wait_for(accepted, 2)
        assert len(accepted) == 1
