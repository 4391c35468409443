"""The DRA slice publisher against the real API server of the e2e cluster, through the driver's
own API client (rest_api): the API server takes the slices the fixture tree makes exactly as
written (no field dropped by a gate), a slice deleted by someone else comes back at a higher
generation, and a change of the inventory is one replace. The observer is kubectl, not the
client under test."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.apiserver.rest_api import connect
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Health, Inventory
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.pool_rules import dropped_fields
from kae_deviceplugin.dra.publisher import SlicePublisher
from kae_deviceplugin.dra.slices import NodeRef, build_slices
from tests.e2e.cluster import REPO, Cluster, wait_until

pytestmark = pytest.mark.needs("dra")

FIXTURE = REPO / "sysfs_fixtures" / "kunpeng920-2p"


def our_slices(cluster: Cluster) -> list[dict[str, Any]]:
    found = cluster.get(
        "resourceslices", f"--field-selector=spec.driver={DRIVER},spec.nodeName={cluster.node}"
    )
    items: list[dict[str, Any]] = found["items"]
    return items


class PublisherThread:
    """The publisher on its own loop and thread, fed inventories by the test thread."""

    def __init__(self, cluster: Cluster, node: NodeRef, inventory: Inventory) -> None:
        self.node = node
        self.inventories = LatestValue(inventory)
        self.loop = asyncio.new_event_loop()
        self.publisher: SlicePublisher | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.kubeconfig = Path(cluster.kubeconfig)

    def build(
        self, inventory: Inventory, generation: int, dropped: frozenset[str] = frozenset()
    ) -> list[dict[str, Any]]:
        queues = {d.pci_address: 256 for d in inventory}
        return list(build_slices(inventory, self.node, generation=generation, queues=queues).slices)

    async def _run(self) -> None:
        api = connect(self.kubeconfig)
        self.publisher = SlicePublisher(api, DRIVER, self.node.name, self.build)
        try:
            await self.publisher.run(self.inventories)
        finally:
            await api.close()

    def start(self) -> None:
        self.thread.start()
        self.task = asyncio.run_coroutine_threadsafe(self._run(), self.loop)

    def publish(self, inventory: Inventory) -> None:
        self.loop.call_soon_threadsafe(self.inventories.publish, inventory)

    def stop(self) -> None:
        """Cancel the publisher, let it close its client, then stop and close the loop."""
        self.task.cancel()
        concurrent.futures.wait([self.task], timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def publisher(cluster: Cluster) -> Iterator[PublisherThread]:
    node = cluster.get("node", cluster.node)
    running = PublisherThread(
        cluster,
        NodeRef(cluster.node, node["metadata"]["uid"]),
        scan(FIXTURE / "sys", FIXTURE / "dev"),
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()
        cluster.kubectl(
            "delete", "resourceslices", f"--field-selector=spec.driver={DRIVER}", check=False
        )


def test_the_api_server_keeps_the_slices_exactly_and_they_come_back(
    cluster: Cluster, publisher: PublisherThread
) -> None:
    """Published as built (nothing dropped), re-created after a delete (a new slice: a higher
    generation), replaced on a change (one slice changed: the same generation)."""
    [stored] = wait_until("the slice published", lambda: our_slices(cluster) or None)
    wanted = publisher.build(publisher.inventories.value, stored["spec"]["pool"]["generation"])
    assert dropped_fields(wanted[0]["spec"], stored["spec"]) == []
    assert stored["metadata"]["ownerReferences"][0]["uid"] == publisher.node.uid
    assert len(stored["spec"]["devices"]) == 6
    first = stored["spec"]["pool"]["generation"]

    cluster.kubectl("delete", "resourceslice", stored["metadata"]["name"])
    [again] = wait_until(
        "the slice re-created",
        lambda: [s for s in our_slices(cluster) if s["spec"]["pool"]["generation"] > first] or None,
    )
    assert len(again["spec"]["devices"]) == 6

    inventory = publisher.inventories.value
    sick = dataclasses.replace(inventory.devices[0], health=Health.UNHEALTHY, reasons=("isolated",))
    publisher.publish(Inventory((sick, *inventory.devices[1:])))
    [changed] = wait_until(
        "the unhealthy device left out",
        lambda: [s for s in our_slices(cluster) if len(s["spec"]["devices"]) == 5] or None,
    )
    assert changed["spec"]["pool"]["generation"] == again["spec"]["pool"]["generation"]
