"""The pod-resources poller against the emulated kubelet over a real unix socket: it reports
what the kubelet lists and every change, keeps the last answer through failures (logged once
per change of state), re-dials a restarted kubelet, and holds missing holders back while the
kubelet has just started; and the DRA claim devices are read out of a List answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kae_deviceplugin._generated.podresources.v1 import api_pb2
from kae_deviceplugin.kubelet.podresources import (
    ClaimDevice,
    ListResponse,
    allocations_from,
    claim_devices_from,
)
from kae_deviceplugin.kubelet.podresources_poll import Holders, HoldersPoll, changes
from kae_deviceplugin.testing.podresources_emulator import (
    ClaimDevices,
    PodResourcesEmulator,
    pod_resources,
)
from tests.support.harness import short_tmpdir

HPRE = "openfuyao.com/kae.hpre"
DRIVER = "kae.openfuyao.com"
DEADLINE = 10.0
A = ("ns", "a", "main", HPRE, ["0000:79:00.0"])
B = ("ns", "b", "main", HPRE, ["0000:b9:00.0"])


def by_device(response: ListResponse) -> Holders:
    """Device ID -> pod, the simplest reading a poller can be given."""
    return {row.device_id: row.pod for row in allocations_from(response).rows}


@pytest.fixture
def kubelet() -> Iterator[PodResourcesEmulator]:
    with short_tmpdir() as root, PodResourcesEmulator(root / "pr" / "kubelet.sock") as emulator:
        yield emulator


class Seen:
    """The poller's calls of ``changed``, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, str], dict[str, str]]] = []

    async def __call__(self, before: Holders, after: Holders) -> None:
        self.calls.append((dict(before), dict(after)))


def poller(socket: Path, seen: Seen, **kwargs: float) -> HoldersPoll:
    kwargs.setdefault("settle", 0.0)
    return HoldersPoll(socket, by_device, seen, what="test holders", **kwargs)


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(DEADLINE):
        while not condition():
            await asyncio.sleep(0.01)


def test_claim_devices_are_read_for_one_driver_only() -> None:
    """dynamic_resources of every container, this driver's devices only, sorted; a container
    with device-plugin devices beside keeps those for allocations_from."""
    claims = [
        ClaimDevices("ns", "p", "c", "ns", "cl", DRIVER, "node-1", ["zip-0000-75-00-0"]),
        ClaimDevices("ns", "p", "c", "ns", "gpu", "gpu.example.com", "node-1", ["gpu-0"]),
        ClaimDevices("ns", "p", "c", "ns", "cl", DRIVER, "node-1", ["hpre-0000-79-00-0"]),
    ]
    response = api_pb2.ListPodResourcesResponse(pod_resources=pod_resources([A], claims))
    assert claim_devices_from(response, DRIVER) == (
        ClaimDevice("ns", "p", "c", "ns", "cl", "node-1", "hpre-0000-79-00-0"),
        ClaimDevice("ns", "p", "c", "ns", "cl", "node-1", "zip-0000-75-00-0"),
    )
    assert [row.pod for row in allocations_from(response).rows] == ["a"]


def test_changes_name_new_holders_and_freed_keys() -> None:
    """A key with another holder counts as taken again; a key gone is freed."""
    assert changes({"x": "p", "y": "q"}, {"x": "r", "z": "s"}) == ({"x": "r", "z": "s"}, ["y"])
    assert changes({"x": "p"}, {"x": "p"}) == ({}, [])


def test_every_change_is_reported_and_nothing_else(kubelet: PodResourcesEmulator) -> None:
    """The first answer, a new holder and a holder gone each call ``changed`` once, with the
    holders before and after; asks that find the same call nothing."""
    kubelet.set_pods([A])
    seen = Seen()
    poll = poller(kubelet.socket_path, seen, interval=0.02)

    async def main() -> None:
        task = asyncio.create_task(poll.run())
        try:
            await until(lambda: len(seen.calls) == 1)
            asks = poll.asks
            await until(lambda: poll.asks >= asks + 3)
            kubelet.set_pods([A, B])
            await until(lambda: len(seen.calls) == 2)
            kubelet.set_pods([B])
            await until(lambda: len(seen.calls) == 3)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    a, b = {"0000:79:00.0": "a"}, {"0000:b9:00.0": "b"}
    assert seen.calls == [({}, a), (a, {**a, **b}), ({**a, **b}, b)]
    assert poll.settled.is_set()


def test_a_failing_kubelet_keeps_the_last_answer_and_is_logged_once(
    kubelet: PodResourcesEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    """UNAVAILABLE for several asks: the holders stay, one warning; answers again: one info,
    and a holder gone meanwhile is reported then."""
    kubelet.set_pods([A])
    seen = Seen()
    poll = poller(kubelet.socket_path, seen)

    async def main() -> None:
        await poll.poll()
        kubelet.set_failing()
        for _ in range(3):
            await poll.poll()
        assert (poll.holders, poll.answered) == ({"0000:79:00.0": "a"}, False)
        kubelet.set_failing(None)
        kubelet.set_pods([])
        await poll.poll()

    with caplog.at_level(logging.INFO, "kae_deviceplugin.kubelet.podresources_poll"):
        asyncio.run(main())
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in messages] == ["WARNING", "INFO"], messages
    assert "UNAVAILABLE" in messages[0][1] and "keeping the last answer (1)" in messages[0][1]
    assert seen.calls == [({}, {"0000:79:00.0": "a"}), ({"0000:79:00.0": "a"}, {})]
    assert poll.answered


def test_an_absent_socket_settles_the_first_ask_and_a_restarted_kubelet_is_redialled(
    kubelet: PodResourcesEmulator,
) -> None:
    """No socket: the first ask ends (``settled``) with nothing known. The kubelet then
    starts, stops and starts again on the same path: the poller's kept channel is dropped on
    the failure and the new kubelet's answer arrives."""
    socket = kubelet.socket_path
    kubelet.stop()
    seen = Seen()
    poll = poller(socket, seen)

    async def main() -> None:
        await poll.poll()
        assert poll.settled.is_set() and not poll.answered and poll.holders == {}
        kubelet.set_pods([A])
        kubelet.start()
        await poll.poll()
        assert poll.holders == {"0000:79:00.0": "a"}
        kubelet.stop()
        await poll.poll()
        assert not poll.answered
        kubelet.set_pods([B])
        kubelet.start()
        await poll.poll()
        assert poll.holders == {"0000:b9:00.0": "b"}

    asyncio.run(main())


def test_a_just_started_kubelet_cannot_free_a_holder_until_it_settles(
    kubelet: PodResourcesEmulator,
) -> None:
    """While the socket is younger than ``settle``, a holder missing from the answer is kept
    and a new one counts at once; once the socket is older, the missing holder is freed."""
    kubelet.set_pods([A])
    seen = Seen()
    poll = poller(kubelet.socket_path, seen, settle=3600.0)

    async def main() -> None:
        await poll.poll()
        kubelet.set_pods([B])  # A not re-admitted yet, B already
        await poll.poll()
        assert poll.holders == {"0000:79:00.0": "a", "0000:b9:00.0": "b"}
        poll.settle = 0.0  # as if an hour had passed since the socket was made
        await poll.poll()
        assert poll.holders == {"0000:b9:00.0": "b"}

    asyncio.run(main())
    assert len(seen.calls) == 3
