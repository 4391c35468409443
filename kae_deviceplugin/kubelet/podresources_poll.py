"""Who holds which device, kept current by asking the kubelet's pod-resources List on a timer.

Each front end must know what the *other* API gave away on a node that changed modes with pods
running (issue 27): the DRA driver which devices device-plugin pods hold, the device plugin
which devices DRA claims hold. The kubelet's device manager and its DRA manager do not know of
each other; only the kubelet's pod-resources API reports both. Its v1 has no watch, so it is
asked every ``interval`` seconds (5 s: a mode change is a rare event, and until the holder ends
the device stays out of reach anyway) on one channel kept open between asks; the answer is read
into ``holders`` (a key, e.g. a device's name, -> who holds it) and ``changed`` is awaited with
the last and the new holders whenever they differ.

Rules, and why:

* A failed ask keeps the last answer: a kubelet restarting must not free what its pods hold.
  Failures are logged once per change of kind, and once when the kubelet answers again; a
  failed channel is dropped and dialled anew, so no reconnect backoff outlives a restart.
* List reports the kubelet's *active* pods: a pod drops out once its containers have stopped,
  so a holder ends when its pod does, whether or not anyone released the device.
* A kubelet that has just started may answer before it has re-admitted every running pod. For
  ``settle`` seconds after the socket was made (the kubelet makes it anew at each start) a
  holder missing from an answer is kept; new holders count at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import MappingProxyType

import grpc

from kae_deviceplugin.kubelet.podresources import (
    LIST_TIMEOUT,
    ListResponse,
    PodResourcesUnavailable,
    list_on,
    open_channel,
)

log = logging.getLogger(__name__)

POLL_INTERVAL = 5.0
KUBELET_SETTLE = 30.0  # after the socket is made, how long a missing holder is kept

Holders = Mapping[str, str]
Read = Callable[[ListResponse], Holders]
Changed = Callable[[Holders, Holders], Awaitable[None]]  # (the last holders, the new ones)
_NOBODY: Holders = MappingProxyType({})


def changes(old: Holders, new: Holders) -> tuple[dict[str, str], list[str]]:
    """What a new answer changed: keys held now that were not (or by another holder), and keys
    no longer held, each sorted."""
    held = {key: holder for key, holder in sorted(new.items()) if old.get(key) != holder}
    return held, sorted(set(old) - set(new))


class HoldersPoll:
    """Keeps ``holders`` as the kubelet last reported them; see the module's rules.

    ``what`` names, in the log, what the answers are for (e.g. "devices held by device-plugin
    pods"). ``settled`` is set once the first ask has ended, answered or not, so a caller can
    hold back what must not go out before the kubelet had its say (the first slices).
    """

    def __init__(
        self,
        socket: Path,
        read: Read,
        changed: Changed,
        *,
        what: str,
        interval: float = POLL_INTERVAL,
        settle: float = KUBELET_SETTLE,
        timeout: float = LIST_TIMEOUT,
    ) -> None:
        self.socket = socket
        self.read = read
        self.changed = changed
        self.what = what
        self.interval = interval
        self.settle = settle
        self.timeout = timeout
        self.holders: Holders = _NOBODY
        self.answered = False  # whether the last ask was answered
        self.asks = 0
        self.settled = asyncio.Event()
        self._failure: str | None = None  # the kind of the failure last logged
        self._channel: grpc.aio.Channel | None = None

    async def run(self, done: Callable[[], bool] = lambda: False) -> None:
        """Ask, then every ``interval`` seconds, until cancelled or ``done()`` says so after an
        ask. Never raises for the kubelet's failures."""
        try:
            while True:
                await self.poll()
                if done():
                    return
                await asyncio.sleep(self.interval)
        finally:
            await self._drop_channel()

    async def poll(self) -> None:
        """One ask; ``changed`` is awaited when the holders differ from the last ones."""
        self.asks += 1
        try:
            fresh = await self._ask()
        except PodResourcesUnavailable as err:
            self.answered = False
            self._failed(err)
            return
        finally:
            self.settled.set()
        self.answered = True
        self._answered()
        holders = self._settled(fresh)
        if holders != self.holders:
            before, self.holders = self.holders, holders
            await self.changed(before, holders)

    async def _ask(self) -> Holders:
        if self._channel is None:
            # No socket, no kubelet to ask: say so without making (and tearing down) a gRPC
            # channel every interval, which was most of an idle driver's CPU.
            if not self.socket.exists():
                raise PodResourcesUnavailable("absent", f"{self.socket} does not exist")
            self._channel = open_channel(self.socket)
        try:
            response = await list_on(self._channel, self.socket, self.timeout)
        except PodResourcesUnavailable:
            await self._drop_channel()
            raise
        except Exception as err:  # anything else from gRPC is the kubelet's too, never ours
            await self._drop_channel()
            raise PodResourcesUnavailable(type(err).__name__, f"{self.socket}: {err}") from err
        return MappingProxyType(dict(self.read(response)))

    def _settled(self, fresh: Holders) -> Holders:
        """``fresh``, with the holders it lacks kept while the kubelet is just started."""
        try:
            age = time.time() - self.socket.stat().st_ctime
        except OSError:
            return fresh
        if age >= self.settle or not set(self.holders) - set(fresh):
            return fresh
        return MappingProxyType({**self.holders, **fresh})

    async def _drop_channel(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close(None)

    def _failed(self, err: PodResourcesUnavailable) -> None:
        if err.kind != self._failure:
            kept = f"; keeping the last answer ({len(self.holders)})" if self.holders else ""
            log.warning("pod-resources API unavailable (%s): %s not known%s", err, self.what, kept)
        self._failure = err.kind

    def _answered(self) -> None:
        if self._failure is not None:
            log.info("pod-resources API at %s answers again: %s known", self.socket, self.what)
        self._failure = None
