"""The endpoint's door into the daemon's loop: closed, it starts nothing more there, and it
closes only once what it started has ended, so the loop's shutdown finds nothing unfinished."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.kubelet.podresources import AllocationsSource
from kae_deviceplugin.observability.http import EndpointTask, daemon_routes
from kae_deviceplugin.observability.loop_calls import LoopCalls, LoopClosed
from tests.observability.test_probes import ABSENT_SOCKET, FakeDaemon
from tests.support.harness import DEADLINE


@contextlib.contextmanager
def running_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running on its own thread, as the daemon's does beside the HTTP workers."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(DEADLINE)
        loop.close()


def on(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run_coroutine_threadsafe(coro, loop).result(DEADLINE)


async def other_tasks() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks() - {asyncio.current_task()}


def test_a_closed_door_refuses_calls_without_making_a_coroutine() -> None:
    """After close(), call and awaited raise LoopClosed (a RuntimeError, answered 503) and the
    coroutine function is never even called: nothing is left for the loop to destroy."""
    made: list[str] = []

    async def work() -> int:
        return 1

    def factory() -> Coroutine[Any, Any, int]:
        made.append("coroutine")
        return work()

    with running_loop() as loop:
        calls = LoopCalls(loop)
        assert calls.awaited(factory, DEADLINE) == 1 and calls.call(lambda: 2, DEADLINE) == 2
        on(loop, calls.close())
        with pytest.raises(LoopClosed):
            calls.awaited(factory, DEADLINE)
        with pytest.raises(RuntimeError):
            calls.call(lambda: 2, DEADLINE)
        assert made == ["coroutine"]
        assert on(loop, other_tasks()) == set()


def test_close_waits_for_the_calls_already_started() -> None:
    """A call under way when the door closes runs to its end and its caller gets the answer;
    close() returns only after it."""
    order: list[str] = []
    started = threading.Event()

    with running_loop() as loop:
        calls = LoopCalls(loop)
        release = asyncio.Event()

        async def slow() -> int:
            started.set()
            await release.wait()
            order.append("call ended")
            return 42

        async def close() -> None:
            await calls.close()
            order.append("closed")

        with ThreadPoolExecutor(1) as worker:
            answer = worker.submit(calls.awaited, slow, DEADLINE)
            assert started.wait(DEADLINE)
            closing = asyncio.run_coroutine_threadsafe(close(), loop)
            loop.call_soon_threadsafe(release.set)  # after close() began: it runs first
            closing.result(DEADLINE)
            assert answer.result(DEADLINE) == 42
        assert order == ["call ended", "closed"]


def test_a_scrape_after_the_door_closed_asks_the_kubelet_nothing() -> None:
    """A worker still holding a /metrics request when the endpoint stops gets 503; no
    pod-resources ask is made and no task is left on the loop (the unfinished ask that the
    loop's shutdown used to destroy)."""
    with running_loop() as loop:
        source = AllocationsSource(ABSENT_SOCKET, max_age=0.0)
        calls = LoopCalls(loop)
        routes = daemon_routes(FakeDaemon(), source, calls)
        assert routes["/metrics"]({}).status == 200 and source.queries == 1
        on(loop, calls.close())
        assert routes["/metrics"]({}).status == 503
        assert routes["/allocations"]({}).status == 503
        assert routes["/readyz"]({}).status == 503
        assert source.queries == 1
        assert on(loop, other_tasks()) == set()


def test_the_endpoint_task_closes_its_door_when_it_stops() -> None:
    """EndpointTask.run, cancelled as the daemon stops, has closed its door when it returns."""
    daemon = FakeDaemon()
    daemon.settings = dataclasses.replace(
        Settings(), metrics_address="127.0.0.1:0", pod_resources_socket=ABSENT_SOCKET
    )
    task = EndpointTask(max_age=0.0)

    async def scenario() -> None:
        running = asyncio.create_task(task.run(daemon))
        assert await asyncio.to_thread(task.bound.wait, DEADLINE)
        assert task.calls is not None
        assert await asyncio.to_thread(task.calls.call, lambda: "open", DEADLINE) == "open"
        running.cancel()
        await asyncio.wait({running})
        with pytest.raises(LoopClosed):
            await asyncio.to_thread(task.calls.call, lambda: "open", DEADLINE)

    asyncio.run(scenario())
