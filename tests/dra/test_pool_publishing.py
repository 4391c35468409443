"""One instance's publishing job: the Node lookup retried while the API server is away (and
named in ``problems``), one publisher per node with the other instance standing by (ready)
and taking over when the first stops, and a publisher that fails unexpectedly started again."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from kae_deviceplugin.apiserver.seam import NODES, RESOURCE_SLICES
from kae_deviceplugin.core.backoff import Backoff
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.pool_publishing import PoolPublishing
from kae_deviceplugin.dra.publisher import SlicePublisher
from kae_deviceplugin.errors import ApiError
from tests.dra.inventories import fixture_inventory
from tests.dra.test_publisher_faults import build
from tests.support.fake_apiserver import FakeApiServer

NODE_NAME = "node-a"
NODE_UID = "6f1c1d2e-0000-4000-8000-000000000001"
DEADLINE = 10.0


def api_with_node() -> FakeApiServer:
    api = FakeApiServer()
    api.objects[(NODES.plural, None, NODE_NAME)] = {
        "metadata": {"name": NODE_NAME, "uid": NODE_UID, "resourceVersion": "1"}
    }
    return api


def job(api: FakeApiServer, plugin_dir: Path) -> PoolPublishing:
    return PoolPublishing(
        api,
        NODE_NAME,
        plugin_dir,
        lambda _job: SlicePublisher(api, DRIVER, NODE_NAME, build, min_interval=0.0),
        backoff=Backoff(start=0.05, cap=0.2, rng=random.Random(5)),
    )


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(DEADLINE):
        while not condition():
            await asyncio.sleep(0.005)


def slices(api: FakeApiServer) -> list[str]:
    return [key[2] for key in api.objects if key[0] == RESOURCE_SLICES.plural]


def test_the_node_lookup_waits_for_the_api_server_and_says_so(tmp_path: Path) -> None:
    """Node GETs refused without an answer: the job keeps trying (several GETs), problems name
    the Node and the error, nothing raises; once the server answers, the pool is published
    with the Node as its owner and problems are empty."""
    api = api_with_node()
    api.refuse["get"] = ApiError("get nodes/node-a: API server not reachable")
    publishing = job(api, tmp_path)
    inventories = LatestValue(fixture_inventory("kunpeng920-2p"))

    async def main() -> None:
        task = asyncio.create_task(publishing.run(inventories))
        try:
            await until(lambda: api.calls["get"] >= 3)
            [problem] = publishing.problems()
            assert "waiting for Node node-a" in problem and "not reachable" in problem
            del api.refuse["get"]
            await until(lambda: len(slices(api)) == 1 and not publishing.problems())
            [stored] = [api.objects[(RESOURCE_SLICES.plural, None, n)] for n in slices(api)]
            assert stored["metadata"]["ownerReferences"][0]["uid"] == NODE_UID
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()

    asyncio.run(main())


def test_a_second_instance_stands_by_ready_and_takes_over_at_the_stop(tmp_path: Path) -> None:
    """Two instances on one plugin directory: the second stands by with no problems (so a
    surge rollout's new pod is ready) and makes no write; when the first stops, it takes over
    and repairs what happened meanwhile."""
    api = api_with_node()
    first, second = job(api, tmp_path), job(api, tmp_path)
    inventories = LatestValue(fixture_inventory("kunpeng920-2p"))

    async def main() -> None:
        one = asyncio.create_task(first.run(inventories))
        await until(lambda: len(slices(api)) == 1)
        two = asyncio.create_task(second.run(inventories))
        try:
            await until(lambda: second.standby)
            assert second.problems() == [] and second.publisher.writes == 0
            one.cancel()
            await asyncio.gather(one, return_exceptions=True)
            api.wipe(RESOURCE_SLICES)
            await until(lambda: not second.standby and len(slices(api)) == 1)
            assert second.publisher.writes == 1
        finally:
            two.cancel()
            await asyncio.gather(two, return_exceptions=True)

    asyncio.run(main())


def test_a_publisher_that_fails_unexpectedly_is_started_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in the slice builder (it raises once): logged with its traceback, named in
    problems, and the job starts again and publishes."""
    api = api_with_node()
    calls = {"n": 0}

    def flaky(inventory: Inventory, generation: int, dropped: frozenset[str]) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug")
        return build(inventory, generation, dropped)

    publishing = PoolPublishing(
        api,
        NODE_NAME,
        tmp_path,
        lambda _job: SlicePublisher(api, DRIVER, NODE_NAME, flaky, min_interval=0.0),  # type: ignore[arg-type]
        backoff=Backoff(start=0.05, cap=0.2, rng=random.Random(5)),
    )

    async def main() -> None:
        task = asyncio.create_task(publishing.run(LatestValue(fixture_inventory("kunpeng920-2p"))))
        try:
            await until(lambda: len(slices(api)) == 1)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert any("publishing ResourceSlices failed" in r.getMessage() and r.exc_info
               for r in caplog.records)  # fmt: skip
