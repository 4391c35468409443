"""The DevicePlugin service of one resource: answers the kubelet from a broadcast view."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc

from kae_deviceplugin.api import list_and_watch_response, pb, pb_grpc, plugin_options
from kae_deviceplugin.container.allocate import require_view, resolve_request
from kae_deviceplugin.container.edits import ContainerEdits, container_edits
from kae_deviceplugin.container.serving import ServingPolicy
from kae_deviceplugin.core import placement
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.engines import ENGINES, ENGINES_BY_RESOURCE
from kae_deviceplugin.core.views import ResourceView
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.errors import AllocationError
from kae_deviceplugin.kubelet.socket_names import digest, first_fitting

log = logging.getLogger(__name__)


def socket_names(resource: str) -> tuple[str, str]:
    """The socket's file names, preferred first: a self-explaining one (openfuyao.com/kae.hpre
    -> kae-hpre.sock), then one of 12 bytes, as long as the kubelet's own ``kubelet.sock``
    (``kae`` and a digest of the resource), for a directory where the first would not fit."""
    return f"kae-{ENGINES_BY_RESOURCE[resource].name}.sock", f"kae{digest(resource, size=3)}.sock"


def is_our_socket(name: str) -> bool:
    """Whether a file name is one of the device plugin's sockets (any resource, any form)."""
    return any(name in socket_names(engine.resource) for engine in ENGINES)


def socket_name(resource: str) -> str:
    """The preferred socket file name (``socket_names``)."""
    return socket_names(resource)[0]


def socket_path(directory: Path, resource: str, setting: str, root: Path) -> Path:
    """Where ``resource``'s socket goes in ``directory``: the first name that fits a unix
    socket address; SocketPathTooLong naming ``setting`` (valued ``root``) if none does."""
    return first_fitting(directory, socket_names(resource), setting, root)


def allocate_answer(edits: ContainerEdits) -> pb.ContainerAllocateResponse:
    """A container's edits as the kubelet's Allocate answer carries them."""
    return pb.ContainerAllocateResponse(
        devices=[
            pb.DeviceSpec(
                container_path=n.container_path, host_path=n.host_path, permissions=n.permissions
            )
            for n in edits.device_nodes
        ],
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in edits.mounts
        ],
        envs=dict(edits.env),
        cdi_devices=[pb.CDIDevice(name=name) for name in edits.cdi_devices],
    )


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    """Answers the kubelet from the current snapshot only; never touches sysfs on a call."""

    def __init__(
        self,
        resource: str,
        latest: LatestValue[ResourceView],
        policy: Callable[[], ServingPolicy],
        on_stream_lost: Callable[[str], None],
        counters: Counters,
    ) -> None:
        self.resource = resource
        self.engine = ENGINES_BY_RESOURCE[resource]
        self.counters = counters
        self.latest = latest
        self.policy = policy
        self.on_stream_lost = on_stream_lost
        self.stopping = False
        # Every stream gets a serial number, so that readiness can count only streams opened
        # after our registration began: a stream any client opened before proves nothing.
        self.last_serial = 0
        self.open_serials: set[int] = set()
        self._candidates: tuple[ResourceView | None, dict[str, placement.Candidate]] = (None, {})
        self._message: tuple[ResourceView | None, pb.ListAndWatchResponse | None] = (None, None)

    @property
    def streams(self) -> int:
        """How many ListAndWatch streams are open now."""
        return len(self.open_serials)

    def streams_since(self, serial: int) -> int:
        """How many open streams were opened after stream number ``serial``."""
        return sum(1 for s in self.open_serials if s > serial)

    def message(self, view: ResourceView) -> pb.ListAndWatchResponse:
        """The ListAndWatch message of a view, built once however many streams send it."""
        cached_view, cached = self._message
        if cached_view is not view or cached is None:
            cached = list_and_watch_response(view.kubelet_view)
            self._message = (view, cached)
        return cached

    def candidates(self, view: ResourceView) -> dict[str, placement.Candidate]:
        """Candidates of the current view, built once per view rather than once per call."""
        cached_view, cached = self._candidates
        if cached_view is not view:
            cached = placement.candidates_of(view.devices)
            self._candidates = (view, cached)
        return cached

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[pb.Empty, pb.DevicePluginOptions]
    ) -> pb.DevicePluginOptions:
        return plugin_options()

    async def ListAndWatch(
        self,
        request: pb.Empty,
        context: grpc.aio.ServicerContext[pb.Empty, pb.ListAndWatchResponse],
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        self.last_serial += 1
        serial = self.last_serial
        self.open_serials.add(serial)
        log.debug("%s: ListAndWatch stream %d opened", self.resource, serial)
        last_sent: object = None
        try:
            async for _version, view in self.latest.updates():
                kubelet_view = view.kubelet_view
                if kubelet_view == last_sent:
                    continue
                last_sent = kubelet_view
                yield self.message(view)
        finally:
            self.open_serials.discard(serial)
            if not self.stopping:
                # The kubelet never re-dials a stream; only a new Register brings it back.
                log.warning("%s: the kubelet closed its ListAndWatch stream", self.resource)
                self.on_stream_lost(self.resource)

    async def GetPreferredAllocation(
        self,
        request: pb.PreferredAllocationRequest,
        context: grpc.aio.ServicerContext[
            pb.PreferredAllocationRequest, pb.PreferredAllocationResponse
        ],
    ) -> pb.PreferredAllocationResponse:
        with self.counters.timed("GetPreferredAllocation"):
            view = self.latest.value
            candidates = self.candidates(view)
            policy = self.policy().allocation_policy
            response = pb.PreferredAllocationResponse()
            for req in request.container_requests:
                chosen = placement.preferred_allocation(
                    candidates,
                    available=list(req.available_deviceIDs),
                    must_include=list(req.must_include_deviceIDs),
                    size=req.allocation_size,
                    policy=policy,
                )
                response.container_responses.append(
                    pb.ContainerPreferredAllocationResponse(deviceIDs=chosen)
                )
            return response

    async def Allocate(
        self,
        request: pb.AllocateRequest,
        context: grpc.aio.ServicerContext[pb.AllocateRequest, pb.AllocateResponse],
    ) -> pb.AllocateResponse:
        with self.counters.timed("Allocate"):
            view = self.latest.value
            options = self.policy().container
            response = pb.AllocateResponse()
            try:
                if not request.container_requests:
                    raise AllocationError(
                        "INVALID_ARGUMENT", f"{self.resource}: no container requests"
                    )
                require_view(self.resource, options)
                for req in request.container_requests:
                    devices = resolve_request(view, list(req.devices_ids))
                    edits = container_edits(self.engine.name, devices, options)
                    response.container_responses.append(allocate_answer(edits))
            except AllocationError as err:
                self.counters.allocation_failed(self.resource, err.code)
                log.warning("Allocate refused: %s", err)
                await context.abort(getattr(grpc.StatusCode, err.code), str(err))
            self.counters.allocated(self.resource)
            # Per-call lines would drown the log on a busy node; kae_allocations_total counts them
            # and the pod-resources API says who holds what.
            if log.isEnabledFor(logging.DEBUG):
                key = f"{self.engine.env_prefix}_PCI_ADDRESSES"
                allocated = "; ".join(r.envs[key] for r in response.container_responses)
                log.debug("%s: allocated %s", self.resource, allocated)
            return response

    async def PreStartContainer(
        self,
        request: pb.PreStartContainerRequest,
        context: grpc.aio.ServicerContext[
            pb.PreStartContainerRequest, pb.PreStartContainerResponse
        ],
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()
