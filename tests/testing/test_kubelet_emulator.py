"""The kubelet emulator behaves like the kubelet's device manager toward a plugin."""

from __future__ import annotations

import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from kae_deviceplugin._generated.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from kae_deviceplugin._generated.podresources.v1 import api_pb2 as pr_pb2
from kae_deviceplugin._generated.podresources.v1 import api_pb2_grpc as pr_grpc
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.kubelet_rules import EmulatedDevice, resource_name_problem
from kae_deviceplugin.testing.podresources_emulator import PodDevices, PodResourcesEmulator

RESOURCE = "kae.example.com/hisi_hpre"
WAIT = 5.0  # deadline for things that should happen at once


def device(dev_id: str, health: str = "Healthy", *numa: int) -> api_pb2.Device:
    topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=n) for n in numa])
    return api_pb2.Device(ID=dev_id, health=health, topology=topology if numa else None)


_END = None  # queued to a ListAndWatch stream to make the plugin end it


class FakePlugin(api_pb2_grpc.DevicePluginServicer):
    """A minimal device plugin: publishes what the test gives it and records what it is asked."""

    def __init__(self, devices: Sequence[api_pb2.Device]) -> None:
        self.devices = list(devices)
        self.options_error: grpc.StatusCode | None = None
        self.options_calls = 0
        self.watch_calls = 0
        self.cancelled_streams = 0
        self.pre_started: list[list[str]] = []
        self._streams: list[queue.Queue[list[api_pb2.Device] | None]] = []
        self._cond = threading.Condition()

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    def publish(self, devices: Sequence[api_pb2.Device] | None) -> None:
        """Send a new full list on every open stream; None ends the streams."""
        with self._cond:
            for stream in self._streams:
                stream.put(None if devices is None else list(devices))

    def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> api_pb2.DevicePluginOptions:
        with self._cond:
            self.options_calls += 1
            self._cond.notify_all()
        if self.options_error is not None:
            context.abort(self.options_error, "options refused by the fake")
        return api_pb2.DevicePluginOptions(
            pre_start_required=True, get_preferred_allocation_available=True
        )

    def ListAndWatch(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        updates: queue.Queue[list[api_pb2.Device] | None] = queue.Queue()

        def cancelled() -> None:
            with self._cond:
                self.cancelled_streams += 1
                self._cond.notify_all()
            updates.put(_END)

        with self._cond:
            self.watch_calls += 1
            self._streams.append(updates)
            self._cond.notify_all()
        context.add_callback(cancelled)
        devices: list[api_pb2.Device] | None = self.devices
        while devices is not None and context.is_active():
            yield api_pb2.ListAndWatchResponse(devices=devices)
            devices = updates.get()

    def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreferredAllocationResponse:
        answers = []
        for want in request.container_requests:
            extra = [d for d in want.available_deviceIDs if d not in want.must_include_deviceIDs]
            chosen = [*want.must_include_deviceIDs, *extra][: want.allocation_size]
            answers.append(api_pb2.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return api_pb2.PreferredAllocationResponse(container_responses=answers)

    def Allocate(
        self, request: api_pb2.AllocateRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocateResponse:
        known = {d.ID for d in self.devices}
        answers = []
        for container in request.container_requests:
            unknown = set(container.devices_ids) - known
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown {sorted(unknown)}")
            answers.append(
                api_pb2.ContainerAllocateResponse(envs={"IDS": ",".join(container.devices_ids)})
            )
        return api_pb2.AllocateResponse(container_responses=answers)

    def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreStartContainerResponse:
        self.pre_started.append(list(request.devices_ids))
        return api_pb2.PreStartContainerResponse()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Unix socket paths are limited to ~107 bytes, so stay out of pytest's long tmp_path.
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="kae"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(short_dir: Path) -> Iterator[KubeletEmulator]:
    with KubeletEmulator(short_dir, dial_timeout=1.0) as emulator:
        yield emulator


Serve = Callable[[FakePlugin, str], None]


@pytest.fixture
def serve(short_dir: Path) -> Iterator[Serve]:
    servers: list[grpc.Server] = []

    def start(plugin: FakePlugin, endpoint: str) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api_pb2_grpc.add_DevicePluginServicer_to_server(plugin, server)
        server.add_insecure_port(f"unix://{short_dir / endpoint}")
        server.start()
        servers.append(server)

    yield start
    for server in servers:
        server.stop(grace=None).wait()


def register(
    directory: Path, resource: str = RESOURCE, endpoint: str = "fake.sock", version: str = "v1beta1"
) -> None:
    with grpc.insecure_channel(f"unix://{directory / 'kubelet.sock'}") as channel:
        request = api_pb2.RegisterRequest(
            version=version, endpoint=endpoint, resource_name=resource
        )
        api_pb2_grpc.RegistrationStub(channel).Register(request, timeout=WAIT)


def register_error(directory: Path, **fields: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        register(directory, **fields)
    return caught.value


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("kae.kunpeng.com/hisi_hpre", True),
        ("example.com/a", True),
        ("example.com/a.b_c-D9", True),
        ("no-domain", False),
        ("kubernetes.io/widget", False),
        ("sub.kubernetes.io/widget", False),
        ("requests.example.com/widget", False),
        ("Example.com/widget", False),
        ("example.com/", False),
        ("example.com/-widget", False),
        ("example.com/widget_", False),
        ("example.com/" + "w" * 64, False),
        ("example.com/" + "w" * 63, True),
        ("a/b/c", False),
    ],
)
def test_resource_name_rules(name: str, ok: bool) -> None:
    """Resource names follow the kubelet's extended-resource rules (section 2 of FACTS)."""
    assert (resource_name_problem(name) is None) == ok


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"version": "v1alpha"}, "version"),
        ({"resource": "widget"}, "domain prefix"),
        ({"resource": "kubernetes.io/widget"}, "kubernetes.io"),
        ({"endpoint": "../fake.sock"}, "file name"),
        ({"endpoint": "sub/fake.sock"}, "file name"),
        ({"endpoint": ""}, "file name"),
    ],
)
def test_register_validation_errors(
    kubelet: KubeletEmulator, serve: Serve, fields: dict[str, str], words: str
) -> None:
    """An invalid RegisterRequest fails with UNKNOWN, is recorded, and never dials the plugin."""
    plugin = FakePlugin([device("d0")])
    serve(plugin, "fake.sock")
    error = register_error(kubelet.directory, **fields)
    assert error.code() == grpc.StatusCode.UNKNOWN
    assert words in (error.details() or "")
    assert [r.reason for r in kubelet.rejections] == [error.details()]
    assert kubelet.registrations == []
    assert plugin.options_calls == 0


def test_register_dials_back_before_answering(kubelet: KubeletEmulator, serve: Serve) -> None:
    """GetDevicePluginOptions has been called by the time Register returns; options are kept."""
    plugin = FakePlugin([device("d0")])
    serve(plugin, "fake.sock")
    register(kubelet.directory)
    assert plugin.options_calls == 1
    [record] = kubelet.registrations
    assert (record.resource, record.endpoint) == (RESOURCE, "fake.sock")
    assert record.options.pre_start_required and record.options.get_preferred_allocation_available


def test_register_fails_when_nothing_serves_the_endpoint(kubelet: KubeletEmulator) -> None:
    """Registering before serving fails once the dial-back deadline passes."""
    error = register_error(kubelet.directory, endpoint="absent.sock")
    assert error.code() == grpc.StatusCode.UNKNOWN
    assert "dial-back" in (error.details() or "")
    assert kubelet.registrations == []


def test_register_fails_when_options_call_fails(kubelet: KubeletEmulator, serve: Serve) -> None:
    """A plugin whose GetDevicePluginOptions errors is not registered."""
    plugin = FakePlugin([device("d0")])
    plugin.options_error = grpc.StatusCode.INTERNAL
    serve(plugin, "fake.sock")
    error = register_error(kubelet.directory)
    assert "INTERNAL" in (error.details() or "")
    assert kubelet.resources() == {}


def test_stream_messages_are_recorded(kubelet: KubeletEmulator, serve: Serve) -> None:
    """Each ListAndWatch message replaces the device list; count and timestamp advance."""
    plugin = FakePlugin([device("d0", "Healthy", 0), device("d1", "Healthy", 2)])
    serve(plugin, "fake.sock")
    register(kubelet.directory)
    assert kubelet.wait_for(lambda k: len(k.resources().get(RESOURCE, [])) == 2, WAIT)
    assert kubelet.resources()[RESOURCE] == [
        EmulatedDevice("d0", "Healthy", (0,)),
        EmulatedDevice("d1", "Healthy", (2,)),
    ]
    first = kubelet.state(RESOURCE)
    assert first is not None and first.messages == 1 and first.updated_at is not None

    plugin.publish([device("d1", "Unhealthy", 2), device("d2")])
    assert kubelet.wait_for(
        lambda k: (s := k.state(RESOURCE)) is not None and s.messages == 2, WAIT
    )
    second = kubelet.state(RESOURCE)
    assert second is not None and second.updated_at is not None
    assert second.updated_at >= first.updated_at
    assert [(d.id, d.healthy, d.numa_nodes) for d in second.devices] == [
        ("d1", False, (2,)),
        ("d2", True, ()),
    ]


def test_stream_end_marks_devices_unhealthy_without_redial(
    kubelet: KubeletEmulator, serve: Serve
) -> None:
    """When the plugin ends ListAndWatch, every device turns unhealthy and nothing re-dials."""
    plugin = FakePlugin([device("d0"), device("d1")])
    serve(plugin, "fake.sock")
    register(kubelet.directory)
    assert kubelet.wait_for(lambda k: bool(k.resources().get(RESOURCE)), WAIT)
    plugin.publish(None)
    assert kubelet.wait_for(lambda k: (s := k.state(RESOURCE)) is not None and s.stream_ended, WAIT)
    assert [d.health for d in kubelet.resources()[RESOURCE]] == ["Unhealthy", "Unhealthy"]
    assert not plugin.wait_for(lambda: plugin.watch_calls > 1, timeout=0.3)


def test_new_registration_replaces_the_stream(
    kubelet: KubeletEmulator, serve: Serve, short_dir: Path
) -> None:
    """A second Register follows the new plugin and, as the kubelet does, leaves the old
    connection and its stream open (kubernetes issue 121994)."""
    old, new = FakePlugin([device("old")]), FakePlugin([device("new")])
    serve(old, "old.sock")
    serve(new, "new.sock")
    register(short_dir, endpoint="old.sock")
    assert kubelet.wait_for(
        lambda k: [d.id for d in k.resources().get(RESOURCE, [])] == ["old"], WAIT
    )
    register(short_dir, endpoint="new.sock")
    assert kubelet.wait_for(lambda k: [d.id for d in k.resources()[RESOURCE]] == ["new"], WAIT)
    assert old.cancelled_streams == 0
    state = kubelet.state(RESOURCE)
    assert state is not None and not state.stream_ended and state.devices[0].healthy
    assert [r.endpoint for r in kubelet.registrations] == ["old.sock", "new.sock"]


def test_restart_deletes_every_socket(
    kubelet: KubeletEmulator, serve: Serve, short_dir: Path
) -> None:
    """Restart removes all sockets (plugins' too), keeps other files, and drops capacity to 0."""
    plugin = FakePlugin([device("d0")])
    serve(plugin, "fake.sock")
    register(short_dir)
    assert kubelet.wait_for(lambda k: bool(k.resources().get(RESOURCE)), WAIT)
    (short_dir / "kubelet_internal_checkpoint").write_text("{}")
    stray = socket.socket(socket.AF_UNIX)
    stray.bind(str(short_dir / "stray.sock"))
    # A hard link in a subdirectory (not scanned) keeps the old inode alive, so a re-created
    # kubelet.sock must have a different one.
    (short_dir / "keep").mkdir()
    os.link(kubelet.socket_path, short_dir / "keep" / "old.sock")
    before = os.stat(kubelet.socket_path).st_ino

    kubelet.restart()
    stray.close()

    names = sorted(p.name for p in short_dir.iterdir())
    assert names == ["keep", "kubelet.sock", "kubelet_internal_checkpoint"]
    assert os.stat(kubelet.socket_path).st_ino != before
    assert kubelet.resources() == {RESOURCE: []}
    assert plugin.wait_for(lambda: plugin.cancelled_streams == 1, WAIT)
    with pytest.raises(KeyError):
        kubelet.allocate(RESOURCE, ["d0"])

    serve(plugin, "fake2.sock")
    register(short_dir, endpoint="fake2.sock")
    assert kubelet.wait_for(lambda k: [d.id for d in k.resources()[RESOURCE]] == ["d0"], WAIT)


def test_wait_for_returns_false_at_deadline(kubelet: KubeletEmulator) -> None:
    """wait_for gives up after its timeout and reports False."""
    started = time.monotonic()
    assert not kubelet.wait_for(lambda k: RESOURCE in k.resources(), timeout=0.2)
    assert time.monotonic() - started >= 0.2


def test_calls_to_a_registered_plugin(kubelet: KubeletEmulator, serve: Serve) -> None:
    """Allocate, preferred allocation, pre-start and options reach the plugin; errors surface."""
    plugin = FakePlugin([device("d0"), device("d1"), device("d2")])
    serve(plugin, "fake.sock")
    register(kubelet.directory)

    assert dict(kubelet.allocate(RESOURCE, ["d1"]).container_responses[0].envs) == {"IDS": "d1"}
    many = kubelet.allocate_containers(RESOURCE, [["d0"], ["d1", "d2"]])
    assert [r.envs["IDS"] for r in many.container_responses] == ["d0", "d1,d2"]
    preferred = kubelet.preferred_allocation(RESOURCE, ["d0", "d1", "d2"], ["d2"], 2)
    assert list(preferred.container_responses[0].deviceIDs) == ["d2", "d0"]
    kubelet.pre_start(RESOURCE, ["d0", "d1"])
    assert plugin.pre_started == [["d0", "d1"]]
    assert kubelet.options(RESOURCE).pre_start_required

    with pytest.raises(grpc.RpcError) as caught:
        kubelet.allocate(RESOURCE, ["nope"])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(KeyError):
        kubelet.options("other.example.com/x")


def test_stop_removes_kubelet_socket(short_dir: Path) -> None:
    """stop() (here via the context manager) stops serving and removes kubelet.sock."""
    with KubeletEmulator(short_dir) as emulator:
        assert emulator.serving and emulator.socket_path.exists()
    assert not emulator.serving
    assert not (short_dir / "kubelet.sock").exists()


def test_pod_resources_emulator(short_dir: Path) -> None:
    """List groups assignments per pod and container; Get finds one pod; failing is UNAVAILABLE."""
    with (
        PodResourcesEmulator(short_dir / "pr.sock") as emulator,
        grpc.insecure_channel(f"unix://{short_dir / 'pr.sock'}") as channel,
    ):
        stub = pr_grpc.PodResourcesListerStub(channel)
        emulator.set_pods(
            [
                PodDevices("ns", "web", "app", RESOURCE, ["d0"]),
                ("ns", "web", "app", "kae.example.com/hisi_zip", ["z1"]),
                ("ns", "web", "side", RESOURCE, ["d1"]),
                ("other", "db", "main", RESOURCE, ["d2"]),
            ]
        )
        emulator.set_allocatable({RESOURCE: ["d0", "d1", "d2", "d3"]})

        listed = stub.List(pr_pb2.ListPodResourcesRequest(), timeout=WAIT).pod_resources
        assert [(p.namespace, p.name, [c.name for c in p.containers]) for p in listed] == [
            ("ns", "web", ["app", "side"]),
            ("other", "db", ["main"]),
        ]
        app = listed[0].containers[0]
        assert [(d.resource_name, list(d.device_ids)) for d in app.devices] == [
            (RESOURCE, ["d0"]),
            ("kae.example.com/hisi_zip", ["z1"]),
        ]
        got = stub.Get(pr_pb2.GetPodResourcesRequest(pod_name="db", pod_namespace="other"))
        assert got.pod_resources.containers[0].devices[0].device_ids == ["d2"]
        allocatable = stub.GetAllocatableResources(pr_pb2.AllocatableResourcesRequest())
        assert list(allocatable.devices[0].device_ids) == ["d0", "d1", "d2", "d3"]

        with pytest.raises(grpc.RpcError) as missing:
            stub.Get(pr_pb2.GetPodResourcesRequest(pod_name="db", pod_namespace="ns"))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND

        emulator.set_failing()
        with pytest.raises(grpc.RpcError) as failed:
            stub.List(pr_pb2.ListPodResourcesRequest(), timeout=WAIT)
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        emulator.set_failing(None)
        assert len(stub.List(pr_pb2.ListPodResourcesRequest(), timeout=WAIT).pod_resources) == 2
        assert emulator.calls == 6
