"""The fleet benchmark's parts: synthetic Nodes, one real SlicePublisher per node, and counters.

Every node's publisher talks to the API server through its own client (``connect()`` per node),
as every node of a real fleet has its own: a node's watch holds one HTTP/1.1 connection for as
long as it runs, and one shared httpx client stops at 100 connections, so 1,000 watches could
not share one without changing the client. Each client is wrapped in :class:`CountingApi`,
which counts the calls of the ``ApiServer`` seam and their bytes for all nodes together.

The slices go out under ``kae-fleet.invalid``, not the real driver name: other tests on a
shared cluster list and delete every slice of ``kae.openfuyao.com``, and no DeviceClass may
ever select a device of a node that does not exist. The name has the same length as the real
one, so every byte count is the real driver's.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import functools
import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kae_deviceplugin.apiserver.seam import NODES, RESOURCE_SLICES, ApiServer, JsonObject, Kind
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Function, Health, Inventory, UacceDevice
from kae_deviceplugin.discovery.queues import QueueTotals
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.publisher import MIN_INTERVAL, SlicePublisher
from kae_deviceplugin.dra.slice_devices import DeviceOptions
from kae_deviceplugin.dra.slices import NodeRef, build_slices
from kae_deviceplugin.errors import ApiError

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "sysfs_fixtures" / "kunpeng920-2p-vfs"  # 6 PFs + 12 VFs: 18 devices
FLEET_DRIVER = "kae-fleet.invalid"
assert len(FLEET_DRIVER) == len(DRIVER)
NODE_PREFIX = "kae-fleet-"
FLEET_LABEL = "kae.openfuyao.com/fleet-benchmark"
TAINTS = DeviceOptions(taint_effect="NoSchedule")
ADMIN_CONCURRENCY = 16  # node creates and deletes in flight: a burst, not a flood


def size(obj: Any) -> int:
    """Bytes of ``obj`` as JSON: exactly what the driver's client sends (compact separators,
    ``apiserver.rest_api``); for answers, the API server's own compact JSON of the same
    object, give or take order."""
    return len(_compact(obj))


def _compact(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


@dataclass
class Counts:
    """API calls of every publisher, together: reads (get, list), writes (create, replace,
    delete), watch requests, watch events, bytes sent in write bodies and bytes received, and
    calls that failed (a timeout, a conflict: the publisher retries them)."""

    reads: int = 0
    writes: int = 0
    watches: int = 0
    events: int = 0
    sent: int = 0
    received: int = 0
    failed: int = 0

    def since(self, before: Counts) -> Counts:
        return Counts(
            *(getattr(self, f.name) - getattr(before, f.name) for f in dataclasses.fields(self))
        )

    @property
    def requests(self) -> int:
        return self.reads + self.writes + self.watches


class CountingApi:
    """An ``ApiServer`` around another, counting into shared :class:`Counts`."""

    def __init__(self, inner: ApiServer, counts: Counts) -> None:
        self.inner = inner
        self.counts = counts
        # The node's pool is in the API: a write was answered, or a list found it (after a
        # create that timed out at the client and went through on the server).
        self.published = False

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        self.counts.reads += 1
        with self._failures():
            found = await self.inner.get(kind, name, namespace)
        self.counts.received += size(found)
        return found

    async def list(self, kind: Kind, field_selector: Mapping[str, str]) -> list[JsonObject]:
        self.counts.reads += 1
        with self._failures():
            found = await self.inner.list(kind, field_selector)
        self.counts.received += size(found)
        self.published |= kind == RESOURCE_SLICES and bool(found)
        return found

    async def list_versioned(
        self, kind: Kind, field_selector: Mapping[str, str]
    ) -> tuple[builtins.list[JsonObject], str]:
        self.counts.reads += 1
        with self._failures():
            found, version = await self.inner.list_versioned(kind, field_selector)
        self.counts.received += size(found)
        self.published |= kind == RESOURCE_SLICES and bool(found)
        return found, version

    @contextlib.contextmanager
    def _failures(self) -> Iterator[None]:
        try:
            yield
        except ApiError:
            self.counts.failed += 1
            raise

    async def create(self, kind: Kind, body: JsonObject) -> JsonObject:
        return await self._write(self.inner.create, kind, body)

    async def replace(self, kind: Kind, body: JsonObject) -> JsonObject:
        return await self._write(self.inner.replace, kind, body)

    async def _write(self, call: Any, kind: Kind, body: JsonObject) -> JsonObject:
        self.counts.writes += 1
        self.counts.sent += size(body)
        with self._failures():
            read: JsonObject = await call(kind, body)
        self.counts.received += size(read)
        self.published = True
        return read

    async def delete(self, kind: Kind, name: str, namespace: str | None = None) -> None:
        self.counts.writes += 1
        with self._failures():
            await self.inner.delete(kind, name, namespace)

    async def watch(
        self, kind: Kind, field_selector: Mapping[str, str], start: str | None = None
    ) -> AsyncIterator[tuple[str, JsonObject]]:
        self.counts.watches += 1
        with self._failures():
            async for event, obj in self.inner.watch(kind, field_selector, start):
                self.counts.events += 1
                self.counts.received += size(obj)
                yield event, obj

    async def close(self) -> None:
        await self.inner.close()


@dataclass(frozen=True)
class Inventories:
    """The node's inventory, the same with one device unhealthy, and with one VF more."""

    base: Inventory
    sick: Inventory
    plugged: Inventory
    queues: dict[str, int]  # queue totals of every PCI address of the three


def _sorted(devices: Sequence[UacceDevice]) -> Inventory:
    return Inventory(tuple(sorted(devices, key=lambda d: (d.engine, d.pci_address))))


def inventories() -> Inventories:
    """From the checked-in 2-socket tree with 2 VFs per PF, read once by discovery.

    The hot-plugged VF is the next VF of the first PF that has some, with its sibling's queue
    total (the kernel would re-split the PF's queues; the slice changes the same way)."""
    base = scan(FIXTURE / "sys", FIXTURE / "dev")
    queues = QueueTotals(FIXTURE / "sys").update(base)
    first = base.devices[0]
    sick = dataclasses.replace(first, health=Health.UNHEALTHY, reasons=("isolated",))
    vf = next(d for d in base if d.function is Function.VF)
    siblings = [d for d in base if d.parent_pf == vf.parent_pf]
    address = f"{vf.pci_address[:-1]}{len(siblings) + 1}"
    new = dataclasses.replace(
        vf,
        name=f"{vf.name.rsplit('-', 1)[0]}-{len(base)}",
        pci_address=address,
        pci_path=vf.pci_path.replace(vf.pci_address, address),
        sysfs_path=vf.sysfs_path.replace(vf.pci_address, address),
    )
    return Inventories(
        base=base,
        sick=_sorted([sick, *base.devices[1:]]),
        plugged=_sorted([*base.devices, new]),
        queues={**queues, address: queues[vf.pci_address]},
    )


def node_name(index: int) -> str:
    """``kae-fleet-0001`` for index 0."""
    return f"{NODE_PREFIX}{index + 1:04d}"


def node_body(name: str) -> JsonObject:
    """A Node no pod can land on: tainted NoExecute, without ``kubernetes.io/os`` (the chart's
    DaemonSet selects on it) and with the chart's opt-out label."""
    labels = {FLEET_LABEL: "true", "openfuyao.com/kae.deploy.device-plugin": "false"}
    taint = {"key": FLEET_LABEL, "value": "true", "effect": "NoExecute"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": [taint]},
    }


@dataclass
class FleetNode:
    """One synthetic node: its publisher, its inventory stream, its slice options."""

    ref: NodeRef
    inventories: LatestValue[Inventory]
    options: DeviceOptions
    queues: dict[str, int]
    driver: str
    api: ApiServer | None = None
    publisher: SlicePublisher | None = None
    task: asyncio.Task[None] | None = None

    def build(
        self, inventory: Inventory, generation: int, dropped: frozenset[str]
    ) -> list[JsonObject]:
        plan = build_slices(
            inventory, self.ref, generation=generation, queues=self.queues, options=self.options
        )
        return [renamed(s, self.driver) for s in plan.slices]

    def start(self, api: ApiServer, min_interval: float = MIN_INTERVAL) -> None:
        self.api = api
        self.publisher = SlicePublisher(
            api, self.driver, self.ref.name, self.build, min_interval=min_interval
        )
        self.task = asyncio.create_task(self.publisher.run(self.inventories))


def renamed(slice_: JsonObject, driver: str) -> JsonObject:
    """The slice under ``driver``: its spec.driver, its name and its taint keys."""
    if driver == DRIVER:
        return slice_
    text = _compact(slice_).replace(DRIVER.encode(), driver.encode())
    decoded: JsonObject = json.loads(text)
    return decoded


@dataclass
class Fleet:
    """N synthetic nodes, each with a running publisher."""

    nodes: list[FleetNode] = field(default_factory=list)

    async def stop(self) -> None:
        tasks = [n.task for n in self.nodes if n.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(
            *(n.api.close() for n in self.nodes if n.api is not None), return_exceptions=True
        )

    def published(self) -> bool:
        """Every node's pool is in the API, as its own client saw it."""
        return all(isinstance(n.api, CountingApi) and n.api.published for n in self.nodes)


async def bounded(calls: Sequence[Callable[[], Any]], limit: int = ADMIN_CONCURRENCY) -> list[Any]:
    """Run the coroutine factories ``calls`` with at most ``limit`` in flight."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Any]) -> Any:
        async with gate:
            return await call()

    return await asyncio.gather(*(one(c) for c in calls))


async def create_nodes(admin: ApiServer, count: int) -> list[NodeRef]:
    made = await bounded(
        [functools.partial(admin.create, NODES, node_body(node_name(i))) for i in range(count)]
    )
    return [NodeRef(m["metadata"]["name"], str(m["metadata"]["uid"])) for m in made]


async def _delete(admin: ApiServer, kind: Kind, name: str) -> None:
    try:
        await admin.delete(kind, name)
    except ApiError as err:
        if err.status != 404:  # already gone (the garbage collector was first) is fine
            raise


async def clean_up(admin: ApiServer, driver: str) -> int:
    """Delete every synthetic node and every slice of ``driver`` on one: the nodes' deletion
    collects their slices (owner references), and the slices are deleted too, by a list with
    the driver's field selector, so that none is left if the collector is slow or off."""
    nodes = [
        n["metadata"]["name"]
        for n in await admin.list(NODES, {})
        if n["metadata"]["name"].startswith(NODE_PREFIX)
    ]
    await bounded([functools.partial(_delete, admin, NODES, n) for n in nodes])
    slices = [
        s["metadata"]["name"]
        for s in await admin.list(RESOURCE_SLICES, {"spec.driver": driver})
        if str(s["spec"].get("nodeName", "")).startswith(NODE_PREFIX)
    ]
    await bounded([functools.partial(_delete, admin, RESOURCE_SLICES, s) for s in slices])
    return len(nodes)


async def slices_per_node(admin: ApiServer, driver: str, nodes: Sequence[NodeRef]) -> float:
    """Slices per node, listed node by node on at most 20 nodes spread over the fleet: one list
    of every slice of 1,000 nodes is 10 MB, which a loaded API server on 2 cores does not
    answer within the client's 10 s."""
    sample = nodes[:: max(1, len(nodes) // 20)][:20]
    found = [
        len(await admin.list(RESOURCE_SLICES, {"spec.driver": driver, "spec.nodeName": n.name}))
        for n in sample
    ]
    return sum(found) / len(found)
