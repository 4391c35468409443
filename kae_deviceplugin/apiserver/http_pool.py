"""Connections to one API server: kept alive between calls, each watch on one of its own.

A call takes an idle connection (one the server has closed meanwhile is dropped) or opens one,
and gives it back when its answer was read whole. A kept-alive connection the server closes
just as a request goes out fails that request before any answer: it is sent once more on a new
connection, but for a create (POST), which the server may have received after all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from kae_deviceplugin.apiserver.http1 import MAX_BODY, Connection, Endpoint, Head

# Kept for the next call: as many as the DRA driver's three lanes have under way at once
# (apiserver.paced.IN_FLIGHT each), so a burst of claims finds them open the next time too.
IDLE_CONNECTIONS = 12


class Pool:
    """The connections to ``endpoint``; ``close`` closes every one, a watch's too."""

    def __init__(self, endpoint: Endpoint, max_body: int = MAX_BODY) -> None:
        self.endpoint = endpoint
        self.max_body = max_body
        self._idle: list[Connection] = []
        self._held: set[Connection] = set()  # by a watch

    async def exchange(
        self, method: str, target: str, headers: Mapping[str, str], payload: bytes
    ) -> tuple[Head, bytes]:
        """One request and its whole answer."""
        connection, reused = await self._connection()
        try:
            try:
                await connection.send(method, target, headers, payload)
                head = await connection.head()
            except (ConnectionError, asyncio.IncompleteReadError):
                if not reused or method == "POST":
                    raise
                connection.close()
                connection, reused = await self._connection(fresh=True)
                await connection.send(method, target, headers, payload)
                head = await connection.head()
            data = await connection.body(head)
        except BaseException:
            connection.close()
            raise
        self._release(connection)
        return head, data

    async def hold(self) -> Connection:
        """A new connection for a watch, closed by ``release_held`` (or ``close``)."""
        connection = await Connection.open(self.endpoint, self.max_body)
        self._held.add(connection)
        return connection

    def release_held(self, connection: Connection) -> None:
        self._held.discard(connection)
        connection.close()

    async def close(self) -> None:
        """Every connection dropped and its socket closed when this returns, so a caller that
        closes its loop right after leaks none."""
        for connection in [*self._idle, *self._held]:
            connection.close()
        self._idle.clear()
        self._held.clear()
        await asyncio.sleep(0)  # the transports' connection_lost, which closes each socket

    async def _connection(self, fresh: bool = False) -> tuple[Connection, bool]:
        while self._idle and not fresh:
            connection = self._idle.pop()
            if not connection.stale:
                return connection, True
            connection.close()
        return await Connection.open(self.endpoint, self.max_body), False

    def _release(self, connection: Connection) -> None:
        if connection.reusable and len(self._idle) < IDLE_CONNECTIONS:
            self._idle.append(connection)
        else:
            connection.close()
