"""An emulation of the kubelet's pod-resources endpoint (v1.PodResourcesLister) for tests.

It answers from a list of device assignments that a test sets (device-plugin devices, and the
devices of DRA claims as ``dynamic_resources``), and can be told to fail the way a kubelet that
is restarting or has the endpoint disabled would (UNAVAILABLE).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent import futures
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

import grpc

from kae_deviceplugin._generated.podresources.v1 import api_pb2, api_pb2_grpc


class PodDevices(NamedTuple):
    """Devices of one resource assigned to one container."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: Sequence[str]


Assignment = tuple[str, str, str, str, Sequence[str]]  # the fields of PodDevices, in order


class ClaimDevices(NamedTuple):
    """Devices of one DRA claim (one driver and pool) that one container uses."""

    namespace: str
    pod: str
    container: str
    claim_namespace: str
    claim_name: str
    driver: str
    pool: str
    devices: Sequence[str]


_Container = tuple[dict[str, list[str]], list[api_pb2.DynamicResource]]


def _containers(
    assignments: Iterable[Assignment], claims: Iterable[ClaimDevices]
) -> dict[tuple[str, str], dict[str, _Container]]:
    pods: dict[tuple[str, str], dict[str, _Container]] = {}
    for namespace, pod, container, resource, ids in assignments:
        devices, _ = pods.setdefault((namespace, pod), {}).setdefault(container, ({}, []))
        devices.setdefault(resource, []).extend(ids)
    for claim in claims:
        entry = pods.setdefault((claim.namespace, claim.pod), {})
        _, dynamic = entry.setdefault(claim.container, ({}, []))
        resources = [
            api_pb2.ClaimResource(
                driver_name=claim.driver,
                pool_name=claim.pool,
                device_name=device,
                cdi_devices=[api_pb2.CDIDevice(name=f"{claim.driver}/claim={device}")],
            )
            for device in claim.devices
        ]
        dynamic.append(
            api_pb2.DynamicResource(
                claim_name=claim.claim_name,
                claim_namespace=claim.claim_namespace,
                claim_resources=resources,
            )
        )
    return pods


def pod_resources(
    assignments: Iterable[Assignment], claims: Iterable[ClaimDevices] = ()
) -> list[api_pb2.PodResources]:
    """Group flat assignments and claim devices into the nested messages List returns,
    keeping first-seen order."""
    return [
        api_pb2.PodResources(
            name=pod,
            namespace=namespace,
            containers=[
                api_pb2.ContainerResources(
                    name=container,
                    devices=[
                        api_pb2.ContainerDevices(resource_name=resource, device_ids=ids)
                        for resource, ids in devices.items()
                    ],
                    dynamic_resources=dynamic,
                )
                for container, (devices, dynamic) in containers.items()
            ],
        )
        for (namespace, pod), containers in _containers(assignments, claims).items()
    ]


class PodResourcesEmulator:
    """Serves v1.PodResourcesLister {List, GetAllocatableResources, Get} on a unix socket."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = Path(socket_path)
        self._lock = threading.Lock()
        self._pods: list[api_pb2.PodResources] = []
        self._allocatable: list[api_pb2.ContainerDevices] = []
        self._failure: grpc.StatusCode | None = None
        self._calls = 0
        self._server: grpc.Server | None = None

    def set_pods(
        self, assignments: Iterable[Assignment], claims: Iterable[ClaimDevices] = ()
    ) -> None:
        """Replace the assignments (and DRA claims' devices) List and Get report."""
        pods = pod_resources(assignments, claims)
        with self._lock:
            self._pods = pods

    def set_allocatable(self, devices: Mapping[str, Sequence[str]]) -> None:
        """Replace what GetAllocatableResources reports: resource name -> device IDs."""
        allocatable = [
            api_pb2.ContainerDevices(resource_name=name, device_ids=ids)
            for name, ids in devices.items()
        ]
        with self._lock:
            self._allocatable = allocatable

    def set_failing(self, code: grpc.StatusCode | None = grpc.StatusCode.UNAVAILABLE) -> None:
        """Make every call fail with `code` from now on; None makes calls succeed again."""
        with self._lock:
            self._failure = code

    @property
    def calls(self) -> int:
        """How many calls arrived, failed ones included."""
        with self._lock:
            return self._calls

    def start(self) -> None:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        self.socket_path.unlink(missing_ok=True)

    def __enter__(self) -> PodResourcesEmulator:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _answer(
        self, context: grpc.ServicerContext
    ) -> tuple[list[api_pb2.PodResources], list[api_pb2.ContainerDevices]]:
        """Count the call, fail it if told to, else return consistent copies of the state."""
        with self._lock:
            self._calls += 1
            failure, pods, allocatable = self._failure, list(self._pods), list(self._allocatable)
        if failure is not None:
            context.abort(failure, "pod resources endpoint told to fail")
        return pods, allocatable


class _Lister(api_pb2_grpc.PodResourcesListerServicer):
    # The method names below are fixed by the gRPC API, hence the N802 exemptions.

    def __init__(self, emulator: PodResourcesEmulator) -> None:
        self._emulator = emulator

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        pods, _ = self._emulator._answer(context)
        return api_pb2.ListPodResourcesResponse(pod_resources=pods)

    def GetAllocatableResources(
        self, request: api_pb2.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocatableResourcesResponse:
        _, allocatable = self._emulator._answer(context)
        return api_pb2.AllocatableResourcesResponse(devices=allocatable)

    def Get(
        self, request: api_pb2.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.GetPodResourcesResponse:
        pods, _ = self._emulator._answer(context)
        for pod in pods:
            if (pod.name, pod.namespace) == (request.pod_name, request.pod_namespace):
                return api_pb2.GetPodResourcesResponse(pod_resources=pod)
        context.abort(
            grpc.StatusCode.NOT_FOUND,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )
