"""A small client of the real API server for the cluster benchmarks: requests and watches.

The benchmarks time events on the real cluster (a pod's container running, the node's allocatable
changing) to tens of milliseconds. Polling with ``kubectl`` costs a process per look (~0.1 s) and
would blur exactly that, so this client keeps one TLS connection per watch and stamps every event
with ``time.monotonic()`` as it arrives. It speaks only what ``scripts/cluster/up``'s kubeconfig
holds: a server URL, a CA file and a client certificate and key.
"""

from __future__ import annotations

import http.client
import json
import queue
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class KubeApi:
    """Where the API server is and how to prove who we are, from a kubeconfig file."""

    host: str
    port: int
    context: ssl.SSLContext

    @classmethod
    def from_kubeconfig(cls, path: str) -> KubeApi:
        """The current context's cluster and user (file paths only, as up writes them)."""
        config: dict[str, Any] = yaml.safe_load(Path(path).read_text())
        current = next(c for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c for c in config["clusters"] if c["name"] == current["context"]["cluster"])
        user = next(u for u in config["users"] if u["name"] == current["context"]["user"])
        url = urllib.parse.urlsplit(cluster["cluster"]["server"])
        context = ssl.create_default_context(cafile=cluster["cluster"]["certificate-authority"])
        context.load_cert_chain(user["user"]["client-certificate"], user["user"]["client-key"])
        return cls(url.hostname or "127.0.0.1", url.port or 443, context)

    def connect(self, timeout: float | None = 30.0) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=timeout
        )

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request; the decoded JSON answer, or RuntimeError with the server's message."""
        conn = self.connect()
        try:
            payload = None if body is None else json.dumps(body)
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {data[:300]!r}")
        return json.loads(data) if data else None


@dataclass
class Watch:
    """A watch of one collection, read on a thread; each event comes with its arrival time.

    ``events`` holds ``(monotonic time, event type, object)``. The thread ends when the server
    closes the stream or ``close()`` is called (it shuts the socket down under the reader).
    """

    api: KubeApi
    path: str  # e.g. /api/v1/nodes?fieldSelector=metadata.name%3Dlocalhost
    events: queue.Queue[tuple[float, str, dict[str, Any]]] = field(default_factory=queue.Queue)
    _conn: http.client.HTTPSConnection | None = None
    _thread: threading.Thread | None = None

    def start(self) -> Watch:
        """List once for a resource version, then watch from it, so no change in between is lost."""
        listed = self.api.request("GET", self.path)
        for item in listed.get("items", []):
            self.events.put((time.monotonic(), "LISTED", item))
        version = listed["metadata"]["resourceVersion"]
        sep = "&" if "?" in self.path else "?"
        self._conn = self.api.connect(timeout=None)
        self._conn.request("GET", f"{self.path}{sep}watch=1&resourceVersion={version}")
        resp = self._conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"watch {self.path}: HTTP {resp.status}")
        self._thread = threading.Thread(target=self._read, args=(resp,), daemon=True)
        self._thread.start()
        return self

    def _read(self, resp: http.client.HTTPResponse) -> None:
        try:
            for line in resp:
                event = json.loads(line)
                self.events.put((time.monotonic(), event["type"], event["object"]))
        except (OSError, ValueError, http.client.HTTPException):
            pass  # closed under us by close(), or the server ended the watch

    def next(self, deadline: float) -> tuple[float, str, dict[str, Any]]:
        """The next event, or TimeoutError at the monotonic ``deadline``."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"watch {self.path}: no event before the deadline")
        try:
            return self.events.get(timeout=remaining)
        except queue.Empty:
            raise TimeoutError(f"watch {self.path}: no event before the deadline") from None

    def close(self) -> None:
        """Shut the socket down under the reader (it sees the end of the stream), then close."""
        if self._conn is not None and self._conn.sock is not None:
            self._conn.sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(5)
        if self._conn is not None:
            self._conn.close()

    def __enter__(self) -> Watch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
