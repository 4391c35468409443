"""The supervisor on its own: root tasks live and die together, a finished optional task is
just done, exit codes map refusals and bugs, and the daemon composes readiness from its front
end, driving it from a real scan of a fixture tree."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping, Set
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.core.model import Inventory, QueueBook
from kae_deviceplugin.core.views import ResourceView
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.daemon.roots import supervise
from kae_deviceplugin.daemon.scanloop import ScanLoop
from kae_deviceplugin.daemon.supervisor import Daemon, Heartbeats
from kae_deviceplugin.discovery.incremental import IncrementalScanner
from kae_deviceplugin.errors import StartupError
from kae_deviceplugin.testing.sysfs_trees import TREES

DEADLINE = 10.0


async def _forever(started: list[str], name: str, cancelled: list[str]) -> None:
    started.append(name)
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.append(name)
        raise


def test_a_stop_ends_every_root_task_with_exit_code_0() -> None:
    """Setting the stop event cancels every root task; the code is 0."""
    started: list[str] = []
    cancelled: list[str] = []

    async def main() -> int:
        stopping = asyncio.Event()
        roots = [_forever(started, n, cancelled) for n in ("a", "b")]
        run = asyncio.create_task(supervise(roots, stopping))
        while len(started) < 2:
            await asyncio.sleep(0)
        stopping.set()
        return await asyncio.wait_for(run, DEADLINE)

    assert asyncio.run(main()) == 0
    assert sorted(cancelled) == ["a", "b"]


def test_a_task_that_returns_leaves_the_others_running() -> None:
    """An optional task with nothing to do returns; the rest go on until the stop."""
    started: list[str] = []
    cancelled: list[str] = []
    finished = asyncio.Event()

    async def optional() -> None:
        finished.set()

    async def main() -> int:
        stopping = asyncio.Event()
        run = asyncio.create_task(
            supervise([optional(), _forever(started, "loop", cancelled)], stopping)
        )
        await asyncio.wait_for(finished.wait(), DEADLINE)
        for _ in range(5):  # the supervisor had every chance to react to the return
            await asyncio.sleep(0)
        assert not run.done()
        stopping.set()
        return await asyncio.wait_for(run, DEADLINE)

    assert asyncio.run(main()) == 0
    assert cancelled == ["loop"]


@pytest.mark.parametrize(
    ("error", "code", "traceback"),
    [(StartupError("no socket dir", code=3), 3, False), (ZeroDivisionError("bug"), 1, True)],
    ids=["refusal", "bug"],
)
def test_a_failing_task_stops_the_others_with_its_exit_code(
    caplog: pytest.LogCaptureFixture, error: Exception, code: int, traceback: bool
) -> None:
    """A refusal exits with its own code in one line; a bug exits 1 with its traceback."""
    started: list[str] = []
    cancelled: list[str] = []

    async def failing() -> None:
        while not started:
            await asyncio.sleep(0)
        raise error

    async def main() -> int:
        roots = [failing(), _forever(started, "loop", cancelled)]
        return await asyncio.wait_for(supervise(roots, asyncio.Event()), DEADLINE)

    with caplog.at_level(logging.CRITICAL):
        assert asyncio.run(main()) == code
    assert cancelled == ["loop"]
    [record] = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert str(error) in record.getMessage() or record.exc_info is not None
    assert (record.exc_info is not None) is traceback


def test_heartbeats_fail_once_a_loop_stops_ticking() -> None:
    """alive() holds while every ticker ticked within the budget."""
    beats = Heartbeats()
    tick_a, tick_b = beats.ticker("a"), beats.ticker("b")
    tick_a()
    tick_b()
    now = beats.last["a"]
    assert beats.alive(10.0, now + 5)
    tick_a()
    assert not beats.alive(10.0, beats.last["b"] + 11)


class RecordingFrontEnd:
    """A front end that records what the daemon hands it and says what it is missing."""

    name = "recording"

    def __init__(self) -> None:
        self.views: Mapping[str, ResourceView] = {}
        self.registered: Set[str] = frozenset()
        self.reconciled: list[Inventory] = []
        self.missing = ["nothing registered yet"]
        self.calls: list[str] = []

    def prepare(self) -> None:
        self.calls.append("prepare")

    def describe(self) -> str:
        return "recording front end"

    def root_tasks(self) -> list[Coroutine[Any, Any, None]]:
        return []

    def not_ready(self) -> list[str]:
        return self.missing

    def queue_book(self) -> QueueBook:
        return QueueBook()

    def api_requests(self) -> None:
        return None

    async def reconcile(self, inventory: Inventory, settings: Settings) -> None:
        self.reconciled.append(inventory)

    async def shutdown(self) -> None:
        self.calls.append("shutdown")


def test_the_daemon_drives_its_front_end_from_a_real_scan(tmp_path: Path) -> None:
    """prepare, a first scan reconciled before any task runs, readiness from the front end,
    shutdown and cleanup after the stop."""
    TREES["kunpeng920-2p"].build(tmp_path / "node")
    settings = Settings(sysfs_root=tmp_path / "node" / "sys", dev_root=tmp_path / "node" / "dev")
    front = RecordingFrontEnd()
    cleaned: list[Settings] = []

    async def cleanup(settings: Settings) -> None:
        cleaned.append(settings)

    async def main() -> int:
        stopping = asyncio.Event()
        scanner = IncrementalScanner(settings.sysfs_root, settings.dev_root)
        scan = ScanLoop(settings, scanner, Counters(), reconcile=front.reconcile)
        daemon = Daemon(scan, front, Heartbeats(), stopping, cleanup=cleanup)

        async def check() -> None:
            assert [len(i) for i in front.reconciled] == [6], "the first scan comes first"
            assert daemon.not_ready() == ["nothing registered yet"] and not daemon.ready()
            front.missing = []
            assert daemon.ready()
            daemon.request_stop()

        daemon.add_task(check)
        return await asyncio.wait_for(daemon.run(handle_signals=False), DEADLINE)

    assert asyncio.run(main()) == 0
    assert front.calls == ["prepare", "shutdown"]
    assert cleaned == [settings]
