"""A node back from DRA mode (issue 27): the real device-plugin daemon, the kubelet emulator and
the pod-resources emulator over real sockets. A device a running pod's DRA claim holds
(``dynamic_resources``) is advertised Unhealthy, so allocatable leaves it out, and Healthy again
once the pod is gone; the other devices are untouched; claims of other drivers count for
nothing."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from kae_deviceplugin._generated.podresources.v1 import api_pb2
from kae_deviceplugin.core.health import HELD_BY_DRA_CLAIM
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.core.views import build_views
from kae_deviceplugin.daemon.run import build_daemon
from kae_deviceplugin.deviceplugin.dra_holds import dra_claim_holders
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.podresources_emulator import (
    ClaimDevices,
    PodResourcesEmulator,
    pod_resources,
)
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.dra.inventories import fixture_inventory
from tests.support.harness import DaemonThread, Node, settings_for, short_tmpdir
from tests.support.observability_harness import wait_until

HPRE = "openfuyao.com/kae.hpre"
DRIVER = "kae.openfuyao.com"
HELD = "0000:79:00.0"  # hisi_hpre-2, pool name hpre-0000-79-00-0
CLAIM = ClaimDevices(
    "ml", "infer-0", "main", "ml", "infer-0-kae", DRIVER, "n", ["hpre-0000-79-00-0"]
)
GPU = ClaimDevices(
    "ml", "infer-0", "main", "ml", "gpu", "gpu.example.com", "n", ["hpre-0000-b9-00-0"]
)


@contextmanager
def node_with_pod_resources(
    dra_ran: bool = True, window: float = 60.0
) -> Iterator[tuple[Node, PodResourcesEmulator]]:
    """The daemon on the two-socket tree, asking the pod-resources emulator every 20 ms (its
    socket is new, so the kubelet-start grace is off); ``dra_ran``: the DRA driver's directory
    exists under the kubelet's, as it stays after DRA mode."""
    with short_tmpdir() as workdir:
        root = workdir / "node"
        TREES["kunpeng920-2p"].build(root)
        settings = settings_for(workdir)
        if dra_ran:
            (settings.kubelet_root / "plugins" / DRIVER).mkdir(parents=True)
        pods = PodResourcesEmulator(settings.effective_pod_resources_socket)
        kubelet = KubeletEmulator(settings.effective_device_plugin_dir, dial_timeout=5.0)
        daemon = build_daemon(settings, with_optional=False)
        holds = daemon.front.dra_holds
        holds.poll.interval, holds.poll.settle, holds.window = 0.02, 0.0, window
        runner = DaemonThread(daemon)
        with pods:
            kubelet.start()
            try:
                yield Node(workdir, root, kubelet, runner), pods
            finally:
                try:
                    if runner.alive:
                        runner.stop()
                finally:
                    kubelet.stop()


def health(view: dict[str, tuple[str, tuple[int, ...]]]) -> dict[str, str]:
    return {device_id: state for device_id, (state, _numa) in view.items()}


def test_a_device_held_by_a_claim_is_unhealthy_until_its_pod_is_gone() -> None:
    """Held from the start: only that HPRE is Unhealthy (allocatable 1 of 2), a foreign
    driver's claim on the other HPRE counts for nothing; the pod gone, both are Healthy."""
    with node_with_pod_resources() as (node, pods):
        pods.set_pods([], [CLAIM, GPU])
        node.runner.start()
        assert node.wait_registered()
        want = {HELD: "Unhealthy", "0000:b9:00.0": "Healthy"}
        assert node.wait_view(HPRE, lambda v: health(v) == want), node.view(HPRE)
        pods.set_pods([])
        assert node.wait_view(HPRE, lambda v: set(health(v).values()) == {"Healthy"})
        assert node.view("openfuyao.com/kae.sec") and all(
            state == "Healthy" for state in health(node.view("openfuyao.com/kae.sec")).values()
        )


def test_a_claim_that_appears_later_takes_its_device_out_at_once() -> None:
    """Nothing held at start; a claim pod then listed (two daemons of a mode change overlap):
    its device turns Unhealthy without any rescan, and back when the pod ends."""
    with node_with_pod_resources() as (node, pods):
        node.runner.start()
        assert node.wait_registered()
        assert node.wait_view(HPRE, lambda v: set(health(v).values()) == {"Healthy"})
        pods.set_pods([], [CLAIM])
        assert node.wait_view(HPRE, lambda v: health(v)[HELD] == "Unhealthy"), node.view(HPRE)
        pods.set_pods([])
        assert node.wait_view(HPRE, lambda v: health(v)[HELD] == "Healthy")


def test_asking_stops_once_nothing_is_held_and_never_starts_where_dra_never_ran(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Window over and the last claim pod gone: the holds task ends (it says so) and the
    kubelet is asked no more, through rescans. On a node without the DRA driver's directory it
    never asks at all, held claims or not."""
    caplog.set_level(logging.INFO, logger="kae_deviceplugin.deviceplugin.dra_holds")
    with node_with_pod_resources(window=0.0) as (node, pods):
        pods.set_pods([], [CLAIM])
        node.runner.start()
        assert node.wait_view(HPRE, lambda v: health(v).get(HELD) == "Unhealthy")
        pods.set_pods([])
        assert node.wait_view(HPRE, lambda v: health(v)[HELD] == "Healthy")
        assert wait_until(lambda: "not asked again" in caplog.text)
        calls = pods.calls
        scans = node.daemon.counters.sample("kae_scan_duration_seconds_count")
        node.runner.rescan()
        assert wait_until(
            lambda: node.daemon.counters.sample("kae_scan_duration_seconds_count") > scans
        )
        assert pods.calls == calls
    with node_with_pod_resources(dra_ran=False) as (node, pods):
        pods.set_pods([], [CLAIM])
        node.runner.start()
        assert node.wait_registered()
        assert set(health(node.view(HPRE)).values()) == {"Healthy"}
        assert pods.calls == 0


def test_the_views_say_why_a_held_device_is_unhealthy() -> None:
    """The pure part: the claim holding it and the reason code, the device itself sound."""
    response = api_pb2.ListPodResourcesResponse(pod_resources=pod_resources([], [CLAIM]))
    held = dra_claim_holders(response)
    assert held == {"hpre-0000-79-00-0": "claim ml/infer-0-kae of pod ml/infer-0"}
    inventory: Inventory = fixture_inventory("kunpeng920-2p")
    view = build_views(inventory, {}, held)[HPRE]
    [advertised] = [d for d in view.devices if d.device.pci_address == HELD]
    assert advertised.device.healthy and advertised.health.value == "Unhealthy"
    assert advertised.reasons == (HELD_BY_DRA_CLAIM,)
    assert advertised.held_by == held["hpre-0000-79-00-0"]
