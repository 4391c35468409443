"""One resource's DevicePlugin gRPC server on its own unix socket, fed by a broadcast value."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from kae_deviceplugin.api import list_and_watch_response, pb, pb_grpc, plugin_options
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.allocate import require_view, resolve_request
from kae_deviceplugin.container.edits import ContainerEdits, ContainerOptions, container_edits
from kae_deviceplugin.core import placement
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.engines import ENGINES_BY_RESOURCE
from kae_deviceplugin.core.views import ResourceView
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.errors import AllocationError, SocketVanished
from kae_deviceplugin.kubelet.sockets import prepare_socket_path

log = logging.getLogger(__name__)


def socket_name(resource: str) -> str:
    """A stable, self-explaining socket file name: openfuyao.com/kae.hpre -> kae-hpre.sock."""
    return f"kae-{ENGINES_BY_RESOURCE[resource].name}.sock"


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


@dataclass(frozen=True, slots=True)
class ServingPolicy:
    """Settings the servicer reads on each call (replaced wholesale on config reload)."""

    container: ContainerOptions
    allocation_policy: placement.PolicyName = placement.DEFAULT_POLICY

    @classmethod
    def from_settings(cls, s: Settings, view_problem: str | None = None) -> ServingPolicy:
        """What the settings say every call should answer; ``view_problem`` refuses Allocate."""
        return cls(
            container=ContainerOptions(
                sysfs_root=s.sysfs_root,
                state_dir=s.state_dir,
                sysfs_view=s.container_sysfs_view,
                uadk_numa_hint=s.env.uadk_numa_hint,
                openssl_engines=s.env.openssl_engines,
                cdi=s.cdi,
                host_sysfs_root=s.host_sysfs_root,
                dev_root=s.dev_root,
                host_dev_root=s.host_dev_root,
                view_problem=view_problem,
            ),
            allocation_policy=s.allocation_policy,
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


async def bind_privately(server: grpc.aio.Server, socket_path: Path) -> os.stat_result:
    """Start ``server`` on ``socket_path``, a socket that is never reachable before it is 0600.

    gRPC creates the socket itself, with the mode the process umask allows. Changing the umask
    would affect every thread creating files meanwhile, so instead the socket is bound in a
    fresh 0700 directory beside its final place, made 0600 there and renamed into place (a
    listening unix socket keeps working under its new name). The directory's name starts with
    a dot, which the kubelet's plugin watcher ignores. Returns the socket's stat at its place.
    """
    private = tempfile.mkdtemp(prefix=".kae-", dir=socket_path.parent)  # 0700, umask or not
    bound = os.path.join(private, "s")
    try:
        server.add_insecure_port(f"unix://{bound}")
        await server.start()
        os.chmod(bound, 0o600)
        os.rename(bound, socket_path)
        return os.stat(socket_path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(bound)
        with contextlib.suppress(OSError):
            os.rmdir(private)


class ResourceServer:
    """Owns one gRPC server and its socket; started and stopped by the supervisor only."""

    def __init__(
        self,
        resource: str,
        socket_dir: Path,
        *,
        latest: LatestValue[ResourceView],
        policy: Callable[[], ServingPolicy],
        on_stream_lost: Callable[[str], None],
        counters: Counters,
        extra_servicers: Callable[[grpc.aio.Server], None] | None = None,
    ) -> None:
        self.resource = resource
        self.socket_path = socket_dir / socket_name(resource)
        self.servicer = DevicePluginServicer(resource, latest, policy, on_stream_lost, counters)
        self.extra_servicers = extra_servicers
        self._server: grpc.aio.Server | None = None
        self._identity: tuple[int, int] | None = None

    async def start(self) -> None:
        prepare_socket_path(self.socket_path)
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_DevicePluginServicer_to_server(self.servicer, server)
        if self.extra_servicers is not None:
            self.extra_servicers(server)
        try:
            st = await bind_privately(server, self.socket_path)
        except FileNotFoundError as err:
            await server.stop(None)
            raise SocketVanished(f"{self.socket_path} was removed as soon as it was bound") from err
        except BaseException:
            await server.stop(None)
            raise
        self._identity = (st.st_dev, st.st_ino)
        self._server = server
        log.debug("%s: serving on %s", self.resource, self.socket_path)

    def socket_intact(self) -> bool:
        """False once someone (a restarting kubelet) removed or replaced our socket file."""
        try:
            st = os.lstat(self.socket_path)
        except OSError:
            return False
        return stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == self._identity

    async def stop(self, grace: float = 0.5) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self.servicer.stopping = True
        await server.stop(grace)
        if self.socket_intact():
            self.socket_path.unlink(missing_ok=True)
        self._identity = None
