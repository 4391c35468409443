"""Robustness under load, faults and garbage (bounded in time; runs in CI)."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kae_deviceplugin.api import pb, pb_grpc
from kae_deviceplugin.daemon.run import build_daemon
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.sysfs_builder import find_uacce_dir, set_attribute
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import DEADLINE, DaemonThread, running_node, settings_for, short_tmpdir

HPRE, SEC, ZIP = (f"openfuyao.com/kae.{e}" for e in ("hpre", "sec", "zip"))


def test_fifty_kubelet_restarts_lose_no_registration() -> None:
    """50 restarts in a row: after each, every resource is registered and streaming again."""
    with running_node() as node:
        assert node.wait_registered()
        for attempt in range(50):
            node.kubelet.restart()
            assert node.wait_registered(3), f"lost a registration after restart {attempt + 1}"
        assert set(node.daemon.front.server_set.servers) == {HPRE, SEC, ZIP}
        assert node.runner.alive


def stub(node, resource: str) -> pb_grpc.DevicePluginStub:  # type: ignore[no-untyped-def]
    name = {HPRE: "kae-hpre.sock", SEC: "kae-sec.sock", ZIP: "kae-zip.sock"}[resource]
    channel = grpc.insecure_channel(
        f"unix://{node.daemon.settings.effective_device_plugin_dir / name}"
    )
    return pb_grpc.DevicePluginStub(channel)


def allocate(s: pb_grpc.DevicePluginStub, *containers: list[str]) -> pb.AllocateResponse:
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=c) for c in containers]
    )
    return s.Allocate(request, timeout=DEADLINE)


@pytest.mark.parametrize(
    ("containers", "needle"),
    [
        ([[f"0000:79:00.{i % 8}" for i in range(10_000)]], "at most"),
        ([["0000:79:00.0", "0000:79:00.0"]], "duplicate"),
        ([["0000:79:00.0\x00"]], "unknown"),
        ([["\udcff".encode("utf-8", "surrogatepass").decode("latin-1")]], "unknown"),
        ([[]], "empty"),
        ([], "no container requests"),
        ([["x" * 5000]], "unknown"),
    ],
)
def test_garbage_requests_get_clean_errors(containers: list[list[str]], needle: str) -> None:
    """Oversized, duplicate, odd-byte and empty requests: INVALID_ARGUMENT each, daemon serving."""
    with running_node() as node:
        assert node.wait_registered()
        s = stub(node, HPRE)
        with pytest.raises(grpc.RpcError) as caught:
            allocate(s, *containers)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert needle in (caught.value.details() or "")
        assert allocate(s, ["0000:79:00.0"]).container_responses
        big = pb.ContainerPreferredAllocationRequest(
            available_deviceIDs=[f"id-{i}" for i in range(10_000)], allocation_size=3
        )
        answer = s.GetPreferredAllocation(
            pb.PreferredAllocationRequest(container_requests=[big]), timeout=DEADLINE
        )
        assert len(answer.container_responses[0].deviceIDs) == 3


def test_thousand_concurrent_calls_while_devices_flap() -> None:
    """1,000 Allocate/GetPreferredAllocation calls across resources while isolate flaps:
    each is answered correctly (the device, or FAILED_PRECONDITION for an isolated one)."""
    with running_node("kunpeng920-2p-vfs", scan_interval=0.05) as node:
        assert node.wait_registered()
        stubs = {r: stub(node, r) for r in (HPRE, SEC, ZIP)}
        ids = {r: sorted(node.view(r)) for r in stubs}
        # A PF's flag, which the kernel also answers for its VFs' isolate (0000:76:00.1, .2).
        flapping = "hisi_sec2-0"  # 0000:76:00.0
        stop = threading.Event()

        def flap() -> None:
            rng = random.Random(7)
            while not stop.is_set():
                set_attribute(node.root, flapping, "isolate", rng.choice("01"))

        flapper = threading.Thread(target=flap, daemon=True)
        flapper.start()

        def call(i: int) -> bool:
            resource = (HPRE, SEC, ZIP)[i % 3]
            device = ids[resource][i % len(ids[resource])]
            s = stubs[resource]
            if i % 2:
                answer = s.GetPreferredAllocation(
                    pb.PreferredAllocationRequest(
                        container_requests=[
                            pb.ContainerPreferredAllocationRequest(
                                available_deviceIDs=ids[resource],
                                must_include_deviceIDs=[device],
                                allocation_size=2,
                            )
                        ]
                    ),
                    timeout=DEADLINE,
                )
                chosen = list(answer.container_responses[0].deviceIDs)
                return chosen[0] == device and len(set(chosen)) == 2
            try:
                got = allocate(s, [device]).container_responses[0]
            except grpc.RpcError as err:
                return device in ("0000:76:00.0", "0000:76:00.1", "0000:76:00.2") and (
                    err.code() == grpc.StatusCode.FAILED_PRECONDITION
                )
            engine = resource.rsplit(".", 1)[1].upper()
            return got.envs[f"KAE_{engine}_PCI_ADDRESSES"] == device

        try:
            with ThreadPoolExecutor(16) as pool:
                results = list(pool.map(call, range(1000)))
        finally:
            stop.set()
            flapper.join(DEADLINE)
        assert all(results), results.count(False)
        assert node.runner.alive


def test_daemon_refuses_a_symlinked_socket_path() -> None:
    """A symlink planted at the plugin's socket path is never followed: the daemon stops (1)."""
    with short_tmpdir() as workdir:
        TREES["kunpeng920-2p"].build(workdir / "node")
        settings = settings_for(workdir)
        plugin_dir = settings.effective_device_plugin_dir
        plugin_dir.mkdir(parents=True)
        victim = workdir / "victim"
        victim.write_text("keep me")
        (plugin_dir / "kae-hpre.sock").symlink_to(victim)
        runner = DaemonThread(build_daemon(settings, with_optional=False))
        runner.start()
        with pytest.raises(Exception, match="symlink"):
            runner.stop()
        assert victim.read_text() == "keep me"


ATTRIBUTES = ("isolate", "dev_state", "available_instances", "node_id", "algorithms", "api")
garbage = st.one_of(st.binary(max_size=24), st.sampled_from([b"0", b"1", b"-1", b"", b"256"]))


@pytest.fixture(scope="module")
def served_node():  # type: ignore[no-untyped-def]
    """One daemon for all hypothesis examples (a node per example would be slow)."""
    with running_node("kunpeng920-2p-vfs", scan_interval=0.05) as node:
        assert node.wait_registered()
        yield node


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    writes=st.lists(
        st.tuples(
            st.sampled_from(["hisi_hpre-10", "hisi_sec2-1", "hisi_zip-4", "hisi_zip-17"]),
            st.sampled_from(ATTRIBUTES),
            garbage,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_garbage_sysfs_while_serving(served_node, writes) -> None:  # type: ignore[no-untyped-def]
    """Random attribute contents while serving: the daemon lives, and once it has rescanned, the
    kubelet's view lists exactly the devices discovery sees, with the same health.

    The rescan is asked for, as a uevent would: most of these attributes change on a real node
    only with one. A PF's ``isolate`` written here leaves its VFs' files as they were, and a
    VF's own ``isolate`` may be written apart from its PF's: the kernel answers a VF's with its
    PF's flag, so the daemon's ticks and a full scan both give a VF its PF's reading."""
    node = served_node
    for name, attribute, content in writes:
        (find_uacce_dir(node.root, name) / attribute).write_bytes(content)
    node.runner.rescan()
    truth = scan(node.root / "sys", node.root / "dev")
    expected = {
        r: {d.pci_address: d.health.value for d in truth.for_resource(r)} for r in (HPRE, SEC, ZIP)
    }

    def agrees(kubelet) -> bool:  # type: ignore[no-untyped-def]
        current = kubelet.resources()
        return all({d.id: d.health for d in current.get(r, [])} == expected[r] for r in expected)

    assert node.kubelet.wait_for(agrees, DEADLINE), (expected, node.kubelet.resources())
    assert node.runner.alive
    for name, attribute, _ in writes:  # restore for the next example
        Pristine.restore(node.root, name, attribute)


class Pristine:
    """Original attribute contents of the tree, to undo one example's writes."""

    _cache: ClassVar[dict[tuple[str, str], bytes | None]] = {}

    @classmethod
    def restore(cls, root: Path, name: str, attribute: str) -> None:
        key = (name, attribute)
        if key not in cls._cache:
            with short_tmpdir() as pristine:
                TREES["kunpeng920-2p-vfs"].build(pristine)
                source = find_uacce_dir(pristine, name) / attribute
                cls._cache[key] = source.read_bytes() if source.exists() else None
        target = find_uacce_dir(root, name) / attribute
        original = cls._cache[key]
        if original is None:
            target.unlink(missing_ok=True)
        else:
            target.write_bytes(original)
