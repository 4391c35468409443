"""DRAResourceHealth on a real unix socket: the full list at once, on change, and on a timer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.dra.health import health_message
from kae_deviceplugin.dra.slice_devices import device_name
from kae_deviceplugin.testing.sysfs_builder import set_attribute
from tests.dra.inventories import fixture_inventory
from tests.dra.node import HPRE_0, POOL, Node, build_node
from tests.dra.serving import serving, socket_dir
from tests.support.dra_kubelet import DRAKubelet

DEADLINE = 10.0


@pytest.fixture
def node() -> Iterator[Node]:
    with socket_dir() as root:
        yield build_node(root, "kunpeng920-2p-vfs")


@pytest.mark.parametrize("service", ["v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"])
def test_every_device_at_once_then_each_change(node: Node, service: str) -> None:
    """The first message lists all 18 devices Healthy; isolating hisi_hpre-2 makes the next
    one say Unhealthy with the reason, and recovery says Healthy again."""
    socket = node.root / "dra.sock"
    latest = LatestValue(node.inventory)

    async def scenario() -> None:
        async with (
            serving(socket, node.preparer(), latest, POOL, interval=60.0),
            DRAKubelet(socket, health_service=service) as kubelet,
            kubelet.watch_health() as watch,
        ):
            assert await watch.wait_for_messages(1, DEADLINE)
            state = watch.state()
            assert len(state) == 18 and {s.health for s in state.values()} == {"Healthy"}
            assert set(state) == {(POOL, device_name(d)) for d in node.inventory}
            set_attribute(node.root, "hisi_hpre-2", "isolate", "1")
            node.rescan()
            latest.publish(node.inventory)
            assert await watch.wait_for_messages(2, DEADLINE)
            isolated = watch.state()[(POOL, HPRE_0)]
            assert isolated.health == "Unhealthy" and isolated.message.startswith("isolated")
            set_attribute(node.root, "hisi_hpre-2", "isolate", "0")
            node.rescan()
            latest.publish(node.inventory)
            assert await watch.wait_for_messages(3, DEADLINE)
            assert watch.state()[(POOL, HPRE_0)].health == "Healthy"

    asyncio.run(scenario())


def test_the_list_is_sent_again_without_a_change(node: Node) -> None:
    """With nothing new the full list still comes every interval, so the kubelet never lets a
    device time out to Unknown; the timestamps are the clock's."""
    socket = node.root / "dra.sock"

    async def scenario() -> None:
        async with (
            serving(socket, node.preparer(), LatestValue(node.inventory), POOL, interval=0.05),
            DRAKubelet(socket) as kubelet,
            kubelet.watch_health() as watch,
        ):
            assert await watch.wait_for_messages(4, DEADLINE)
            assert all(s.health == "Healthy" and s.last_updated > 0 for s in watch.state().values())

    asyncio.run(scenario())


def test_a_device_not_heard_of_turns_unknown(node: Node) -> None:
    """The emulator's rule, as the kubelet's: a report older than the timeout is Unknown."""
    socket = node.root / "dra.sock"
    now = [1000.0]

    async def scenario() -> None:
        async with (
            serving(socket, node.preparer(), LatestValue(node.inventory), POOL, interval=60.0),
            DRAKubelet(socket) as kubelet,
            kubelet.watch_health(clock=lambda: now[0]) as watch,
        ):
            assert await watch.wait_for_messages(1, DEADLINE)
            now[0] += 30.0
            assert watch.state()[(POOL, HPRE_0)].health == "Healthy"
            now[0] += 0.5
            assert watch.state()[(POOL, HPRE_0)].health == "Unknown"

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("hisi_sec2-0", "isolated"),
        ("hisi_hpre-2", "engine-stopped"),
        ("hisi_hpre-3", "driver-unbound"),
        ("hisi_zip-4", "dev-node-missing"),
    ],
)
def test_messages_name_the_reason(name: str, reason: str) -> None:
    """Each fault of the faults tree is named first in its message, then what to do."""
    device = {d.name: d for d in fixture_inventory("faults")}[name]
    message = health_message(device)
    assert message.startswith(reason) and "(" in message and len(message) <= 1024
    healthy = fixture_inventory("kunpeng920-2p").devices[0]
    assert health_message(healthy) == ""
