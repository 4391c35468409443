"""DRA mode through a node's life, on the real kubelet and API server, the daemon as a host
process: a claim no device can satisfy waits with the scheduler's reason; a removed device leaves
the pool; a kubelet restart (which wipes the node's slices) leaves running pods their devices and
new pods still prepare; a restarted daemon writes nothing and unprepares from its checkpoint; and
a held device's health reaches its pod's status, Unhealthy and Healthy again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import Cluster, FixtureTree, Plugin, wait_until
from tests.e2e.dra import (
    DRIVER,
    SLEEP,
    allocated,
    cdi_specs,
    checkpoint_claims,
    claim_pod,
    claim_uid,
    delete_template,
    dra_name,
    health_of,
    pod_claim,
    request,
    running_dra_plugin,
    slice_devices,
    slices,
    template,
    uacce_of,
)
from tests.e2e.pods import wait_running

pytestmark = pytest.mark.needs("dra", "cdi")

TREE = "kunpeng920-2p"
ONE_ZIP = template("kae-one-zip", [request("zip", "zip")])


@pytest.fixture
def node(
    cluster: Cluster, tree_factory: Callable[[str], FixtureTree], tmp_path: Path
) -> Iterator[tuple[Plugin, FixtureTree, Path]]:
    """The daemon in DRA mode on the two-socket tree, its pool published; the claim templates
    and pods of a test are deleted after it."""
    tree = tree_factory(TREE)
    with running_dra_plugin(cluster, tree, tmp_path) as (plugin, cdi_dir):
        wait_until(
            "the whole pool published", lambda: len(slice_devices(cluster)) == len(tree.names())
        )
        try:
            yield plugin, tree, cdi_dir
        finally:
            for pod in ("kae-wait", "kae-a", "kae-b", "kae-sick"):
                cluster.delete_pod(pod)
            # The kubelet unprepares after the pod is gone: let this daemon answer before it
            # stops, so the next test starts with no claim spec.
            wait_until("every claim unprepared", lambda: not cdi_specs(cdi_dir), timeout=90)
            for name in ("kae-sm2", "kae-one-zip"):
                delete_template(cluster, name)


def container(cluster: Cluster, pod: str) -> dict[str, Any]:
    """The pod's one container status."""
    [status] = cluster.get("pod", pod)["status"]["containerStatuses"]
    found: dict[str, Any] = status
    return found


def unschedulable(cluster: Cluster, pod: str) -> str | None:
    """The scheduler's message when it reported the pod unschedulable, else None."""
    for cond in cluster.get("pod", pod).get("status", {}).get("conditions", []):
        if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
            message: str = cond.get("message", "")
            return message
    return None


@pytest.mark.timeout(240)
def test_a_claim_no_device_satisfies_waits_with_the_schedulers_reason(
    cluster: Cluster, node: tuple[Plugin, FixtureTree, Path]
) -> None:
    """No fixture HPRE lists sm2 (alg_sm2 is published false): the pod stays Pending, the
    scheduler says why, and no claim is prepared on the node."""
    _plugin, _tree, cdi_dir = node
    cluster.apply(
        template("kae-sm2", [request("sm2", "hpre", f'device.attributes["{DRIVER}"].alg_sm2')])
    )
    cluster.apply(claim_pod(cluster, "kae-wait", "kae-sm2", script=SLEEP))
    message = wait_until("the scheduler's reason", lambda: unschedulable(cluster, "kae-wait"))
    assert "claim" in message, message
    assert cluster.get("pod", "kae-wait")["status"]["phase"] == "Pending"
    assert cdi_specs(cdi_dir) == []


@pytest.mark.timeout(240)
def test_a_removed_device_leaves_the_pool_and_a_new_one_joins_it(
    cluster: Cluster, node: tuple[Plugin, FixtureTree, Path]
) -> None:
    """Hotplug without a restart: the class link of one HPRE goes, and its device leaves the
    node's slice, replaced in one write at the same pool generation (one slice changed); the
    others are untouched."""
    _plugin, tree, _cdi = node
    [before] = slices(cluster)
    gone = next(n for n in tree.names() if n.startswith("hisi_hpre"))
    name = dra_name(tree, gone)  # from its class link, which the removal takes
    tree.remove(gone)
    wait_until("the device out of the pool", lambda: name not in slice_devices(cluster))
    [after] = slices(cluster)
    assert after["spec"]["pool"]["generation"] == before["spec"]["pool"]["generation"]
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    assert set(slice_devices(cluster)) == {dra_name(tree, n) for n in tree.names()}


@pytest.mark.timeout(300)
def test_a_kubelet_restart_keeps_running_pods_and_brings_the_slices_back(
    cluster: Cluster, node: tuple[Plugin, FixtureTree, Path]
) -> None:
    """The restarted kubelet deletes the node's slices; the daemon publishes them again, the
    running pod keeps its container and device, and a new pod still gets one prepared."""
    _plugin, tree, _cdi = node
    cluster.apply(ONE_ZIP)
    cluster.apply(claim_pod(cluster, "kae-a", "kae-one-zip", script=SLEEP))
    wait_running(cluster, "kae-a", timeout=120)
    held = allocated(pod_claim(cluster, "kae-a"))
    container_id = container(cluster, "kae-a")["containerID"]
    old = {s["metadata"]["uid"] for s in slices(cluster)}
    cluster.restart_kubelet()
    wait_until(
        "the slices published again after the kubelet's wipe",
        lambda: (found := slices(cluster)) and not old & {s["metadata"]["uid"] for s in found},
        timeout=90,
    )
    assert set(slice_devices(cluster)) == {dra_name(tree, n) for n in tree.names()}
    cluster.apply(claim_pod(cluster, "kae-b", "kae-one-zip", script=SLEEP))
    wait_running(cluster, "kae-b", timeout=120)
    assert set(allocated(pod_claim(cluster, "kae-b"))).isdisjoint(held)
    status = container(cluster, "kae-a")
    assert (status["containerID"], status["restartCount"]) == (container_id, 0)
    assert allocated(pod_claim(cluster, "kae-a")) == held


@pytest.mark.timeout(300)
def test_a_restarted_daemon_writes_nothing_and_unprepares_from_its_checkpoint(
    cluster: Cluster, node: tuple[Plugin, FixtureTree, Path]
) -> None:
    """A claim prepared by one daemon instance is unprepared by the next: deleting the pod
    after the restart removes the claim's CDI spec. The restart leaves the pool generation."""
    plugin, _tree, cdi_dir = node
    cluster.apply(ONE_ZIP)
    cluster.apply(claim_pod(cluster, "kae-a", "kae-one-zip", script=SLEEP))
    wait_running(cluster, "kae-a", timeout=120)
    specs = wait_until("the claim's CDI spec", lambda: cdi_specs(cdi_dir) or None)
    [before] = slices(cluster)
    plugin.restart()
    plugin.wait_ready()
    [after] = slices(cluster)
    assert after["spec"]["pool"]["generation"] == before["spec"]["pool"]["generation"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    cluster.delete_pod("kae-a")
    wait_until(
        "the spec removed by the new instance",
        lambda: not any(p.exists() for p in specs),
        timeout=90,
    )


@pytest.mark.needs("pod-health")
@pytest.mark.timeout(300)
def test_a_held_devices_health_reaches_its_pods_status(
    cluster: Cluster, node: tuple[Plugin, FixtureTree, Path]
) -> None:
    """isolate=1 on the ZIP a running pod's claim holds: the kubelet's DRA health service
    reports it Unhealthy in the pod's allocatedResourcesStatus; isolate=0: Healthy again."""
    _plugin, tree, _cdi = node
    cluster.apply(ONE_ZIP)
    cluster.apply(claim_pod(cluster, "kae-sick", "kae-one-zip", script=SLEEP))
    wait_running(cluster, "kae-sick", timeout=120)
    [device] = allocated(pod_claim(cluster, "kae-sick"))
    wait_until(
        "the device Healthy in the pod's status",
        lambda: health_of(cluster, "kae-sick", device) == "Healthy",
    )
    isolate = tree.attr(uacce_of(tree, device), "isolate")
    isolate.write_text("1\n")
    wait_until(
        "Unhealthy in the pod's status",
        lambda: health_of(cluster, "kae-sick", device) == "Unhealthy",
    )
    isolate.write_text("0\n")
    wait_until("Healthy again", lambda: health_of(cluster, "kae-sick", device) == "Healthy")
    assert cluster.get("pod", "kae-sick")["status"]["phase"] == "Running"


@pytest.mark.timeout(300)
def test_two_instances_serve_at_once_as_in_a_rolling_update(
    cluster: Cluster, tree_factory: Callable[[str], FixtureTree], tmp_path: Path
) -> None:
    """What the chart's maxSurge relies on: a second daemon with its own pod UID registers
    beside the first (two registration sockets, both registered with the kubelet), and its
    start-up keeps the first one's claim (record and spec). When the first stops, its claim's
    pod keeps running; the second prepares a new claim and its checkpoint write keeps the first
    one's record beside it; deleting the first pod, the second unprepares that claim from the
    shared checkpoint: the record goes, and with it the spec the record names."""
    tree = tree_factory(TREE)
    registry = cluster.kubelet_root / "plugins_registry"
    uids = ("0a0a0a0a-0000-4000-8000-00000000000a", "0b0b0b0b-0000-4000-8000-00000000000b")
    with running_dra_plugin(cluster, tree, tmp_path / "old", pod_uid=uids[0]) as (old, cdi_dir):
        try:
            cluster.apply(ONE_ZIP)
            cluster.apply(claim_pod(cluster, "kae-a", "kae-one-zip", script=SLEEP))
            wait_running(cluster, "kae-a", timeout=120)
            first = claim_uid(cluster, "kae-a")
            record = wait_until("the claim recorded", lambda: checkpoint_claims(cluster).get(first))
            spec = cdi_dir / record["cdiSpec"]
            assert spec.is_file(), record
            with running_dra_plugin(cluster, tree, tmp_path / "new", pod_uid=uids[1]):
                sockets = {p.name for p in registry.glob(f"{DRIVER}-*-reg.sock")}
                assert sockets == {f"{DRIVER}-{uid}-reg.sock" for uid in uids}, sockets
                # The new instance's start-up reconcile removes only specs no record names.
                assert spec.is_file() and first in checkpoint_claims(cluster)
                old.stop()
                assert container(cluster, "kae-a")["restartCount"] == 0
                cluster.apply(claim_pod(cluster, "kae-b", "kae-one-zip", script=SLEEP))
                wait_running(cluster, "kae-b", timeout=120)
                second = claim_uid(cluster, "kae-b")
                assert checkpoint_claims(cluster).keys() == {first, second}
                cluster.delete_pod("kae-a")
                wait_until(
                    "unprepared by the new instance",
                    lambda: first not in checkpoint_claims(cluster) and not spec.exists(),
                    timeout=90,
                )
                assert checkpoint_claims(cluster).keys() == {second}
                cluster.delete_pod("kae-b")
                wait_until("every claim unprepared", lambda: not cdi_specs(cdi_dir), timeout=90)
                assert checkpoint_claims(cluster) == {}
        finally:
            for pod in ("kae-a", "kae-b"):
                cluster.delete_pod(pod)
            delete_template(cluster, "kae-one-zip")
