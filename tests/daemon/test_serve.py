"""`serve` as the kubelet sees it: registration, ListAndWatch, Allocate, over real unix sockets."""

from __future__ import annotations

import os
import stat
import threading

import grpc
import pytest

from kae_deviceplugin.api import pb, pb_grpc
from kae_deviceplugin.daemon.run import build_daemon
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_builder import remove_device, set_attribute
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import DEADLINE, DaemonThread, running_node, settings_for, short_tmpdir

HPRE, SEC, ZIP = (f"openfuyao.com/kae.{e}" for e in ("hpre", "sec", "zip"))


def test_all_resources_register_with_ids_health_and_topology() -> None:
    """Three resources, IDs are PCI addresses, Healthy, NUMA topology from sysfs."""
    with running_node("kunpeng920-2p-vfs") as node:
        assert node.wait_registered(3)
        assert node.view(HPRE) == {
            "0000:79:00.0": ("Healthy", (0,)),
            "0000:79:00.1": ("Healthy", (0,)),
            "0000:79:00.2": ("Healthy", (0,)),
            "0000:b9:00.0": ("Healthy", (2,)),
            "0000:b9:00.1": ("Healthy", (2,)),
            "0000:b9:00.2": ("Healthy", (2,)),
        }
        assert set(node.view(SEC)) == {
            "0000:76:00.0",
            "0000:76:00.1",
            "0000:76:00.2",
            "0000:b6:00.0",
            "0000:b6:00.1",
            "0000:b6:00.2",
        }
        endpoints = {r.resource: r.endpoint for r in node.kubelet.registrations}
        assert endpoints == {HPRE: "kae-hpre.sock", SEC: "kae-sec.sock", ZIP: "kae-zip.sock"}
        options = node.kubelet.options(HPRE)
        assert options.get_preferred_allocation_available


def test_sockets_are_private() -> None:
    """Every plugin socket is created with mode 0600."""
    with running_node() as node:
        assert node.wait_registered(3)
        plugin_dir = node.daemon.settings.effective_device_plugin_dir
        for name in ("kae-hpre.sock", "kae-sec.sock", "kae-zip.sock"):
            mode = os.lstat(plugin_dir / name).st_mode
            assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600, name


def test_allocate_gives_exactly_the_device_nodes_and_env() -> None:
    """Allocate: one DeviceSpec per device (the node under the dev root the daemon reads, at
    /dev/<name> in the container, rw) and KAE_* env."""
    with running_node("kunpeng920-2p-vfs") as node:
        assert node.wait_registered(3)
        answer = node.kubelet.allocate(HPRE, ["0000:79:00.1", "0000:b9:00.0"])
        (container,) = answer.container_responses
        specs = [(d.host_path, d.container_path, d.permissions) for d in container.devices]
        dev = node.root / "dev"
        assert specs == [
            (f"{dev}/hisi_hpre-10", "/dev/hisi_hpre-10", "rw"),
            (f"{dev}/hisi_hpre-3", "/dev/hisi_hpre-3", "rw"),
        ]
        assert container.envs["KAE_HPRE_DEVICES"] == "hisi_hpre-10,hisi_hpre-3"
        assert container.envs["KAE_HPRE_PCI_ADDRESSES"] == "0000:79:00.1,0000:b9:00.0"


def test_allocate_answers_each_container_request() -> None:
    """Several container requests in one call get one response each, in order."""
    with running_node() as node:
        assert node.wait_registered(3)
        answer = node.kubelet.allocate_containers(ZIP, [["0000:75:00.0"], ["0000:b5:00.0"]])
        assert [c.envs["KAE_ZIP_DEVICES"] for c in answer.container_responses] == [
            "hisi_zip-4",
            "hisi_zip-5",
        ]


@pytest.mark.parametrize(
    ("ids", "code", "needle"),
    [
        (["0000:99:00.0"], grpc.StatusCode.INVALID_ARGUMENT, "0000:99:00.0"),
        (["0000:76:00.0"], grpc.StatusCode.INVALID_ARGUMENT, "0000:76:00.0"),  # a SEC device
        ([], grpc.StatusCode.INVALID_ARGUMENT, "empty"),
        (["0000:79:00.0", "0000:79:00.0"], grpc.StatusCode.INVALID_ARGUMENT, "duplicate"),
        (["\x00\xff"], grpc.StatusCode.INVALID_ARGUMENT, "unknown"),
    ],
)
def test_bad_allocate_requests_are_clean_errors(
    ids: list[str], code: grpc.StatusCode, needle: str
) -> None:
    """Unknown, foreign, empty, duplicate IDs: INVALID_ARGUMENT naming the problem; daemon lives."""
    with running_node() as node:
        assert node.wait_registered(3)
        with pytest.raises(grpc.RpcError) as caught:
            node.kubelet.allocate(HPRE, ids)
        assert caught.value.code() == code
        assert needle in (caught.value.details() or "")
        assert node.kubelet.allocate(HPRE, ["0000:79:00.0"]).container_responses
        assert node.runner.alive


def test_unhealthy_device_is_failed_precondition() -> None:
    """Allocating an Unhealthy device is refused with FAILED_PRECONDITION and the reason."""
    with running_node() as node:
        assert node.wait_registered(3)
        set_attribute(node.root, "hisi_sec2-1", "isolate", "1")
        node.runner.rescan()
        assert node.wait_view(SEC, lambda v: v["0000:b6:00.0"][0] == "Unhealthy")
        with pytest.raises(grpc.RpcError) as caught:
            node.kubelet.allocate(SEC, ["0000:b6:00.0"])
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "isolated" in (caught.value.details() or "")


def test_resource_without_devices_at_start_is_not_registered() -> None:
    """No ZIP devices at start: only HPRE and SEC register."""
    with short_tmpdir() as workdir:
        root = workdir / "node"
        TREES["kunpeng920-2p"].build(root)
        remove_device(root, "hisi_zip-4")
        remove_device(root, "hisi_zip-5")
        settings = settings_for(workdir)
        with KubeletEmulator(settings.effective_device_plugin_dir) as kubelet:
            runner = DaemonThread(build_daemon(settings, with_optional=False))
            runner.start()
            try:
                assert kubelet.wait_for(lambda k: len(k.registrations) >= 2, DEADLINE)
                assert {r.resource for r in kubelet.registrations} == {HPRE, SEC}
                assert ZIP not in runner.daemon.front.server_set.servers
            finally:
                assert runner.stop() == 0


def test_vanished_devices_keep_the_resource_registered_with_an_empty_list() -> None:
    """All ZIP devices removed: ZIP stays registered and streams an empty list."""
    with running_node(scan_interval=0.1) as node:
        assert node.wait_registered(3)
        remove_device(node.root, "hisi_zip-4")
        remove_device(node.root, "hisi_zip-5")
        assert node.wait_view(ZIP, lambda v: v == {})
        state = node.kubelet.state(ZIP)
        assert state is not None and not state.stream_ended
        assert [r.resource for r in node.kubelet.registrations].count(ZIP) == 1


def test_every_stream_sees_every_change() -> None:
    """Many concurrent ListAndWatch streams all receive the update (broadcast, not a queue)."""
    with running_node(scan_interval=0.1) as node:
        assert node.wait_registered(3)
        socket = node.daemon.settings.effective_device_plugin_dir / "kae-hpre.sock"
        seen: list[list[str]] = []
        lock = threading.Condition()
        channels = [grpc.insecure_channel(f"unix://{socket}") for _ in range(4)]

        def follow(channel: grpc.Channel) -> None:
            stub = pb_grpc.DevicePluginStub(channel)
            try:
                for message in stub.ListAndWatch(pb.Empty()):
                    with lock:
                        seen.append([d.health for d in message.devices])
                        lock.notify_all()
            except grpc.RpcError:
                pass

        threads = [threading.Thread(target=follow, args=(c,), daemon=True) for c in channels]
        for thread in threads:
            thread.start()
        with lock:
            assert lock.wait_for(lambda: len(seen) >= 4, DEADLINE)
        set_attribute(node.root, "hisi_hpre-3", "isolate", "1")
        with lock:
            assert lock.wait_for(
                lambda: sum("Unhealthy" in health for health in seen) >= 4, DEADLINE
            )
        for channel in channels:
            channel.close()
