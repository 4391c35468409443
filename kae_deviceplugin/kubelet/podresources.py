"""Who holds which KAE device, from the kubelet pod-resources API (`v1.PodResourcesLister/List`).

The device plugin API never says which pod got a device (Allocate names device IDs only, and
nothing reports a release), so the kubelet's own record is the one source of truth. It is read
when someone wants to know, a scrape of ``/metrics`` or a GET of ``/allocations``, through an
:class:`AllocationsSource`, not on a timer: nothing else in the daemon uses it, and a List every
few seconds (a gRPC channel set up and torn down each time) was most of what an idle daemon did
on a node with pods. A missing or failing socket leaves the holder "unknown" (None) and is logged
once per change of state: the endpoint may be disabled (``KubeletPodResources`` off) or the
kubelet restarting, neither of which is the plugin's fault.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import grpc

from kae_deviceplugin._generated.podresources.v1 import api_pb2, api_pb2_grpc
from kae_deviceplugin.core.engines import DRA_DRIVER, ENGINES_BY_RESOURCE
from kae_deviceplugin.kubelet.dial import OWN_CONNECTION, unix_target

log = logging.getLogger(__name__)

LIST_TIMEOUT = 2.0  # a local unix socket: anything slower is a kubelet in trouble
# An answer this young is given again rather than asked anew: scrapes arriving together (two
# Prometheus replicas, a probe of /allocations beside) cost one List.
MAX_AGE = 1.0
OUR_RESOURCES: frozenset[str] = frozenset(ENGINES_BY_RESOURCE)
# List returns every pod of the node; allow more than gRPC's 4 MiB default for crowded nodes.
_MAX_MESSAGE = 32 * 1024 * 1024


# The List answer, for modules that may not import generated code themselves.
ListResponse = api_pb2.ListPodResourcesResponse

# The JSON keys are a stable interface: add keys, never rename or remove them.
RECORD_KEYS = ("resource", "device_id", "namespace", "pod", "container")


@dataclass(frozen=True, slots=True, order=True)
class Allocation:
    """One device ID of one resource held by one container."""

    resource: str
    device_id: str
    namespace: str
    pod: str
    container: str

    @property
    def holder(self) -> tuple[str, str, str]:
        return (self.namespace, self.pod, self.container)

    def as_record(self) -> dict[str, str]:
        """The JSON form served on /allocations and printed by ``list --allocations``."""
        return {name: getattr(self, name) for name in RECORD_KEYS}

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> Allocation:
        """Inverse of as_record; ValueError on a missing or non-string field."""
        values = [record.get(name) for name in RECORD_KEYS]
        if not all(isinstance(value, str) for value in values):
            raise ValueError(f"not an allocation record: {record!r}")
        return cls(*(str(value) for value in values))


def _index(rows: tuple[Allocation, ...]) -> Mapping[str, tuple[tuple[str, str, str], ...]]:
    by_id: dict[str, list[tuple[str, str, str]]] = {}
    for row in rows:
        by_id.setdefault(row.device_id, []).append(row.holder)
    return MappingProxyType({key: tuple(holders) for key, holders in by_id.items()})


@dataclass(frozen=True, slots=True)
class Allocations:
    """Every allocation of our resources at one moment, sorted, with an index by device ID.

    One ID may have several holders: the kubelet hands an init container's devices on to the
    app containers of the same pod, and reports both. ``claims`` are the devices of our DRA
    driver that claims give running containers, where the kubelet reports them (its
    ``dynamic_resources``): the pods of a claim, for the queue metrics' holders.
    """

    rows: tuple[Allocation, ...] = ()
    claims: tuple[ClaimDevice, ...] = ()
    by_id: Mapping[str, tuple[tuple[str, str, str], ...]] = field(
        init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        rows = tuple(sorted(set(self.rows)))
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "by_id", _index(rows))


def allocations_from(
    response: api_pb2.ListPodResourcesResponse, resources: Collection[str] = OUR_RESOURCES
) -> Allocations:
    """The allocations of ``resources`` in a List answer; other resources are ignored."""
    rows = [
        Allocation(devices.resource_name, device_id, pod.namespace, pod.name, container.name)
        for pod in response.pod_resources
        for container in pod.containers
        for devices in container.devices
        if devices.resource_name in resources
        for device_id in devices.device_ids
    ]
    return Allocations(tuple(rows), claim_devices_from(response, DRA_DRIVER))


@dataclass(frozen=True, slots=True, order=True)
class ClaimDevice:
    """One device of a DRA claim that a running container uses, as the kubelet reports it."""

    namespace: str
    pod: str
    container: str
    claim_namespace: str
    claim_name: str
    pool: str
    device: str


def claim_devices_from(
    response: api_pb2.ListPodResourcesResponse, driver: str
) -> tuple[ClaimDevice, ...]:
    """The devices of ``driver`` that DRA claims give the listed containers, sorted."""
    rows = {
        ClaimDevice(
            pod.namespace,
            pod.name,
            container.name,
            claim.claim_namespace,
            claim.claim_name,
            resource.pool_name,
            resource.device_name,
        )
        for pod in response.pod_resources
        for container in pod.containers
        for claim in container.dynamic_resources
        for resource in claim.claim_resources
        if resource.driver_name == driver
    }
    return tuple(sorted(rows))


class PodResourcesUnavailable(Exception):
    """The pod-resources API could not be asked; ``kind`` is stable, the message is for people."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def open_channel(socket: Path) -> grpc.aio.Channel:
    """A channel to the pod-resources socket, for one List or for a poller to keep."""
    options = [("grpc.max_receive_message_length", _MAX_MESSAGE), OWN_CONNECTION]
    return grpc.aio.insecure_channel(unix_target(socket), options=options)


async def list_on(
    channel: grpc.aio.Channel, socket: Path, timeout: float = LIST_TIMEOUT
) -> api_pb2.ListPodResourcesResponse:
    """One List on ``channel``; PodResourcesUnavailable on any failure."""
    if not socket.exists():
        # Dialling a missing socket would only say "UNAVAILABLE"; this says why.
        raise PodResourcesUnavailable("absent", f"{socket} does not exist")
    stub = api_pb2_grpc.PodResourcesListerStub(channel)
    try:
        response: api_pb2.ListPodResourcesResponse = await stub.List(
            api_pb2.ListPodResourcesRequest(), timeout=timeout
        )
    except grpc.aio.AioRpcError as err:
        code = err.code()
        raise PodResourcesUnavailable(code.name, f"{socket}: {code.name}: {err.details()}") from err
    return response


async def list_pod_resources(
    socket: Path, timeout: float = LIST_TIMEOUT
) -> api_pb2.ListPodResourcesResponse:
    """The kubelet's List answer, asked once on a channel of its own."""
    if not socket.exists():  # before dialling: no channel for a socket that is not there
        raise PodResourcesUnavailable("absent", f"{socket} does not exist")
    async with open_channel(socket) as channel:
        return await list_on(channel, socket, timeout)


async def list_allocations(
    socket: Path, resources: Collection[str] = OUR_RESOURCES, timeout: float = LIST_TIMEOUT
) -> Allocations:
    """Ask the kubelet once; raise PodResourcesUnavailable on any failure."""
    return allocations_from(await list_pod_resources(socket, timeout), resources)


class AllocationsHolder:
    """The latest answer: ``current`` is None while unknown; ``problem`` says why."""

    def __init__(self) -> None:
        self.current: Allocations | None = None
        self.problem: str | None = "not asked yet"


class _StateLog:
    """Log a failure once when it starts or changes kind, and once when it clears."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.kind: str | None = None

    def failed(self, err: PodResourcesUnavailable) -> None:
        if err.kind != self.kind:
            log.warning(
                "pod-resources API unavailable (%s); kae_device_allocated and /allocations "
                "have no pod names until it answers",
                err,
            )
        self.kind = err.kind

    def answered(self) -> None:
        if self.kind is not None:
            log.info("pod-resources API at %s answers again", self.socket)
        self.kind = None


class AllocationsSource:
    """The kubelet's answer, asked for when wanted: :meth:`fresh` gives a holder at most
    ``max_age`` seconds old, asking once for every caller that waits meanwhile. Never raises
    for the kubelet's failures (they are the holder's ``problem``)."""

    def __init__(self, socket: Path, max_age: float = MAX_AGE) -> None:
        self.socket = socket
        self.max_age = max_age
        self.holder = AllocationsHolder()
        self._states = _StateLog(socket)
        self._answered_at = -float("inf")
        self._asking: asyncio.Future[None] | None = None
        self.queries = 0

    async def fresh(self) -> AllocationsHolder:
        if time.monotonic() - self._answered_at < self.max_age:
            return self.holder
        if self._asking is not None:
            # Shielded: a waiter giving up does not cancel the future the others wait on.
            await asyncio.shield(self._asking)
            return self.holder
        # The first caller asks in its own task, and the others wait for it. A task of its
        # own for the ask would be made one loop turn before it starts: a loop stopped in
        # between (a test's, under load) destroyed it never started ("Exception ignored in:
        # coroutine AllocationsSource._ask"), and nothing that ends the caller's task ended it.
        asking = self._asking = asyncio.get_running_loop().create_future()
        try:
            await self._ask()
        finally:
            self._asking = None
            asking.set_result(None)
        return self.holder

    async def _ask(self) -> None:
        holder = self.holder
        self.queries += 1
        try:
            holder.current = await list_allocations(self.socket)
            holder.problem = None
            self._states.answered()
        except PodResourcesUnavailable as err:
            holder.current, holder.problem = None, str(err)
            self._states.failed(err)
        except Exception as err:  # anything else from gRPC must not fail the scrape either
            holder.current, holder.problem = None, f"{type(err).__name__}: {err}"
            self._states.failed(PodResourcesUnavailable(type(err).__name__, holder.problem))
        finally:
            self._answered_at = time.monotonic()
