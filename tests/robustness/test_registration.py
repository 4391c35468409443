"""Registration against the kubelet's real behaviours: the plugin watcher acts only on socket
creation, a second Register keeps the old connection (issue 121994), and readiness can't be faked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc

from kae_deviceplugin._generated.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from kae_deviceplugin.daemon.run import build_daemon
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import DEADLINE, DaemonThread, running_node, settings_for, short_tmpdir
from tests.support.plugin_watcher_emulator import PluginWatcherEmulator

HPRE = "openfuyao.com/kae.hpre"


def streaming(kubelet: KubeletEmulator, resource: str) -> bool:
    """The kubelet holds a live stream of ``resource`` with at least one healthy device."""
    state = kubelet.state(resource)
    devices = kubelet.resources().get(resource, [])
    return state is not None and not state.stream_ended and any(d.healthy for d in devices)


class _StreamingPlugin(api_pb2_grpc.DevicePluginServicer):
    """A bare plugin: one device, a stream that stays open until the server stops."""

    def __init__(self) -> None:
        self.stopped = threading.Event()

    def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions()

    def ListAndWatch(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        yield api_pb2.ListAndWatchResponse(devices=[api_pb2.Device(ID="d0", health="Healthy")])
        while context.is_active() and not self.stopped.wait(0.05):
            pass

    def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreferredAllocationResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a test of allocation")

    def Allocate(
        self, request: api_pb2.AllocateRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocateResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a test of allocation")

    def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreStartContainerResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not a test of allocation")


@contextmanager
def bare_plugin(path: Path) -> Iterator[tuple[grpc.Server, _StreamingPlugin]]:
    """A bare plugin serving on ``path`` until the block ends (or it is stopped earlier)."""
    servicer = _StreamingPlugin()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_DevicePluginServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{path}")
    server.start()
    try:
        yield server, servicer
    finally:
        servicer.stopped.set()
        server.stop(grace=None).wait()


def test_the_emulator_keeps_the_kubelets_issue_121994_quirk() -> None:
    """A second Register keeps the first connection; its stream ending drops the new client."""
    with short_tmpdir() as workdir, KubeletEmulator(workdir) as kubelet:
        first_plugin, second_plugin = (
            bare_plugin(workdir / "a.sock"),
            bare_plugin(workdir / "b.sock"),
        )
        with first_plugin as (first, first_servicer), second_plugin:
            for endpoint in ("a.sock", "b.sock"):
                request = api_pb2.RegisterRequest(
                    version="v1beta1", endpoint=endpoint, resource_name=HPRE
                )
                assert kubelet.register(request) is None
            assert kubelet.wait_for(lambda k: streaming(k, HPRE), DEADLINE)
            first_servicer.stopped.set()
            first.stop(grace=None).wait()  # the *old* plugin's stream ends
            assert kubelet.wait_for(lambda k: not streaming(k, HPRE), DEADLINE)
            assert kubelet.disconnects_by_old_streams == 1


def test_the_daemon_never_registers_while_a_stream_is_open() -> None:
    """Against a kubelet with the quirk, restarts and socket sweeps never drop a new client."""
    with running_node(scan_interval=0.1) as node:
        assert node.wait_registered()
        for round_ in range(5):
            node.kubelet.restart()
            assert node.wait_registered(), f"round {round_}: not re-registered"
            (
                node.daemon.front.registrar.socket_dir / "kae-sec.sock"
            ).unlink()  # a sweep of our own socket
            assert node.kubelet.wait_for(
                lambda k: all(streaming(k, r) for r in k.resources()), DEADLINE
            ), f"round {round_}: a resource lost its stream"
        assert node.kubelet.disconnects_by_old_streams == 0


def test_plugin_watcher_mode_recovers_a_stream_the_kubelet_dropped() -> None:
    """The watcher registers only on socket creation: the daemon re-creates the socket."""
    with running_node(registration="plugin-watcher") as node:
        registry = node.daemon.settings.kubelet_root / "plugins_registry"
        with PluginWatcherEmulator(node.kubelet, registry) as watcher:
            assert node.wait_registered()
            assert node.kubelet.registrations and not node.kubelet.rejections
            node.kubelet.drop_stream(HPRE)
            assert node.kubelet.wait_for(lambda k: not streaming(k, HPRE), DEADLINE)
            assert node.kubelet.wait_for(lambda k: streaming(k, HPRE), DEADLINE)
            assert watcher.registered.count(HPRE) == 2
            deadline = time.monotonic() + DEADLINE
            while not node.daemon.ready() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert node.daemon.ready()


def test_a_stream_opened_before_registration_neither_fakes_readiness_nor_blocks_recovery() -> None:
    """Any client may open ListAndWatch on our socket; only the kubelet's answer counts."""
    with short_tmpdir() as workdir:
        TREES["kunpeng920-2p"].build(workdir / "node")
        settings = settings_for(workdir, scan_interval=0.1)
        runner = DaemonThread(build_daemon(settings, with_optional=False))
        runner.start()
        plugin_dir = settings.effective_device_plugin_dir
        rogue_calls: list[grpc.CallIterator[api_pb2.ListAndWatchResponse]] = []
        try:
            deadline = time.monotonic() + DEADLINE
            while not (plugin_dir / "kae-hpre.sock").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            channel = grpc.insecure_channel(f"unix://{plugin_dir / 'kae-hpre.sock'}")
            rogue = api_pb2_grpc.DevicePluginStub(channel).ListAndWatch(api_pb2.Empty())
            rogue_calls.append(rogue)
            first_message: api_pb2.ListAndWatchResponse = next(iter(rogue))
            assert first_message.devices  # the rogue stream is open and fed
            with KubeletEmulator(plugin_dir) as kubelet:
                assert kubelet.wait_for(lambda k: streaming(k, HPRE), DEADLINE)
                kubelet.drop_stream(HPRE)
                assert kubelet.wait_for(lambda k: not streaming(k, HPRE), DEADLINE)
                # Until the daemon brings HPRE back (after its grace period), it must say it is
                # not ready: the rogue stream does not count. Sample until the kubelet streams.
                seen_unready = False
                deadline = time.monotonic() + DEADLINE
                while not streaming(kubelet, HPRE) and time.monotonic() < deadline:
                    seen_unready = seen_unready or not runner.daemon.ready()
                    time.sleep(0.005)
                assert seen_unready
                # The server was restarted (ending the rogue stream) and registered again.
                assert streaming(kubelet, HPRE)
                assert len([r for r in kubelet.registrations if r.resource == HPRE]) == 2
            channel.close()
        finally:
            for call in rogue_calls:
                call.cancel()  # type: ignore[no-untyped-call]  # untyped in grpc-stubs
            runner.stop()


def test_plugin_watcher_mode_leaves_a_restarted_kubelet_to_register_its_sockets() -> None:
    """After a kubelet restart the new plugin watcher registers the sockets it finds and the
    device manager may open their streams only a second later (its first dial failing, as seen
    on the real kubelet). The daemon must not take the wait for a lost stream and re-create a
    socket meanwhile: the kubelet would deregister and register it again, and allocatable would
    drop a second time. One registration per resource after the restart, sockets unchanged."""
    with running_node(registration="plugin-watcher") as node:
        registry = node.daemon.settings.kubelet_root / "plugins_registry"
        with PluginWatcherEmulator(node.kubelet, registry):
            assert node.wait_registered()
            resources = sorted(node.daemon.front.server_set.servers)
            assert node.kubelet.wait_for(
                lambda k: all(streaming(k, r) for r in resources), DEADLINE
            )
        sockets = {p.name: p.stat().st_ino for p in registry.iterdir()}
        node.kubelet.restart()
        with PluginWatcherEmulator(node.kubelet, registry, dial_delay=1.0) as second:
            assert node.kubelet.wait_for(
                lambda k: all(streaming(k, r) for r in resources), DEADLINE
            )
            assert {r: second.registered.count(r) for r in resources} == dict.fromkeys(resources, 1)
            assert {p.name: p.stat().st_ino for p in registry.iterdir()} == sockets
