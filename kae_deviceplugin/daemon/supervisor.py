"""The daemon: supervises the root tasks the composition root (run.py) built, nothing more.

Root tasks live and die together: if one fails, everything stops and the process exits non-zero
so the DaemonSet restarts it, rather than leaving a half-alive plugin. Readiness is composed
from the front end that runs; liveness from every loop's heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable, Coroutine, Mapping, Set
from typing import Any, Generic, Protocol, TypeVar

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.core.engines import DRA_DRIVER
from kae_deviceplugin.core.model import Inventory, QueueBook
from kae_deviceplugin.core.vf_plan import VfChange
from kae_deviceplugin.core.views import ResourceView
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.daemon.roots import signal_handlers, supervise
from kae_deviceplugin.daemon.scanloop import ScanLoop
from kae_deviceplugin.observability.summary import log_summary

log = logging.getLogger(__name__)

RootTask = Callable[[], Coroutine[Any, Any, None]]


class FrontEnd(Protocol):
    """What the daemon needs of a kubelet front end (device plugin, later DRA)."""

    name: str

    @property
    def views(self) -> Mapping[str, ResourceView]: ...
    @property
    def registered(self) -> Set[str]: ...
    def prepare(self) -> None: ...
    def describe(self) -> str: ...
    def root_tasks(self) -> list[Coroutine[Any, Any, None]]: ...
    def not_ready(self) -> list[str]: ...
    def queue_book(self) -> QueueBook: ...
    def api_requests(self) -> Mapping[str, int] | None: ...
    async def shutdown(self) -> None: ...


F = TypeVar("F", bound=FrontEnd)


class Heartbeats:
    """When each loop last ticked: a loop that stops ticking fails the liveness probe."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}

    def ticker(self, name: str) -> Callable[[], None]:
        def tick() -> None:
            self.last[name] = time.monotonic()

        return tick

    def alive(self, budget: float, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return all(now - tick < budget for tick in self.last.values())


class Daemon(Generic[F]):
    """Runs the scan loop, the front end's tasks and the optional ones until a stop or a failure."""

    def __init__(
        self,
        scan: ScanLoop,
        front: F,
        heartbeats: Heartbeats,
        stopping: asyncio.Event,
        *,
        cleanup: Callable[[Settings], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        self.scan = scan
        self.front = front
        self.heartbeats = heartbeats
        self.stopping = stopping
        self.cleanup = cleanup  # after the front end stopped (host files no container holds)
        self.tasks: list[RootTask] = []
        self.loop: asyncio.AbstractEventLoop | None = None

    def add_task(self, task: RootTask) -> None:
        self.tasks.append(task)

    # -- what probes and metrics read (on the loop: see observability.http) -------------------

    @property
    def settings(self) -> Settings:
        return self.scan.settings

    @property
    def inventory(self) -> Inventory:
        return self.scan.inventory

    @property
    def counters(self) -> Counters:
        return self.scan.counters

    @property
    def views(self) -> Mapping[str, ResourceView]:
        return self.front.views

    @property
    def registered(self) -> Set[str]:
        return self.front.registered

    @property
    def expected_registrations(self) -> frozenset[str]:
        """The names the kubelet must have registered before pods are served: each resource the
        device plugin serves, or, in DRA mode, the driver alone (one registration serves every
        engine, and its views' resource names are never registered)."""
        if self.front.name == "dra":
            return frozenset({DRA_DRIVER})
        return frozenset(self.front.views)

    def not_ready(self) -> list[str]:
        return self.front.not_ready()

    def queue_book(self) -> QueueBook:
        """Each device's queue total, and in DRA mode the claims prepared on it."""
        return self.front.queue_book()

    def api_requests(self) -> Mapping[str, int] | None:
        """API server requests sent, by verb (DRA); None where there is no API client."""
        return self.front.api_requests()

    @property
    def vf_changes(self) -> tuple[VfChange, ...]:
        """The VF profiles' last plan, per PF (empty where no profile is set)."""
        profiles = self.scan.profiles
        return profiles.changes if profiles is not None else ()

    def ready(self) -> bool:
        return not self.not_ready()

    def alive(self, now: float | None = None) -> bool:
        """Each root loop ticked recently enough."""
        return self.heartbeats.alive(max(10.0, 3 * self.settings.scan_interval), now)

    # -- running ------------------------------------------------------------------------------

    async def run(self, handle_signals: bool = True) -> int:
        """Serve until SIGTERM/SIGINT (exit code 0) or until a root task fails (non-zero).

        ``handle_signals=False`` lets an embedding program (a test) run the daemon on a thread
        other than the main one, where signal handlers cannot be installed.
        """
        self.loop = asyncio.get_running_loop()
        with signal_handlers(
            self.loop, self.request_stop, self.scan.request_reload, handle_signals
        ):
            self.front.prepare()
            await self.scan.rescan()
            log_summary(self.inventory)
            roots = [self.scan.run(), *self.front.root_tasks(), *(t() for t in self.tasks)]
            code = await supervise(roots, self.stopping)
            await self.shutdown()
            return code

    def call_threadsafe(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the daemon's loop from any thread (tests, the HTTP endpoint)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(callback)

    def request_stop(self, signum: int | None = None) -> None:
        if signum is not None:
            log.info("received %s, shutting down", signal.Signals(signum).name)
        self.stopping.set()

    async def shutdown(self) -> None:
        self.scan.scanner.close()
        await self.front.shutdown()
        log.info("stopped: streams ended, sockets removed")
        if self.cleanup is not None:
            await self.cleanup(self.settings)
