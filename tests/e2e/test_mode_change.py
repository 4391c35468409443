"""A node changing modes with pods running, on the real kubelet and API server (issue 27 item
7), the daemon as a host process in each mode on one fixture tree: no device is given out
through both APIs at once.

(a) Device plugin -> DRA: the HPRE a device-plugin pod holds is published with the taint
``kae.openfuyao.com/held-by-device-plugin`` (NoSchedule, value ``<namespace>.<pod>``), so a claim
pinned to it stays unallocated while a claim on the other HPRE runs; the holder deleted, the
taint is lifted and the pinned claim's pod runs.

(b) DRA -> device plugin: the HPRE a DRA claim pod holds is advertised Unhealthy, so the node's
allocatable leaves it out and a device-plugin pod gets the other one; the claim pod deleted with
no DRA driver left to unprepare stays Terminating and its device stays out until a driver comes
back and unprepares the claim; then the device comes back.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import Cluster, FixtureTree, Plugin, plugin_exe, wait_until
from tests.e2e.dra import (
    DRIVER,
    SLEEP,
    allocated,
    cdi_specs,
    claim_pod,
    delete_template,
    dra_name,
    pod_claim,
    request,
    running_dra_plugin,
    slice_devices,
    template,
)
from tests.e2e.pods import manifest, pod_resources, wait_running

# What the stack must have (tests/e2e/stack.py): on one that lacks it the module skips, naming why.
pytestmark = pytest.mark.needs("dra", "cdi", "dra-taints")

TREE = "kunpeng920-2p"
HELD_KEY = f"{DRIVER}/held-by-device-plugin"
PODS = ("kae-dp", "kae-dp-other", "kae-pinned", "kae-other", "kae-dra")
TEMPLATES = ("kae-pinned-hpre", "kae-other-hpre", "kae-dra-hpre")
HPRE = "openfuyao.com/kae.hpre"


def pinned(name: str, address: str) -> dict[str, Any]:
    """A template asking one HPRE, exactly the one at PCI ``address``."""
    selector = f'device.attributes["resource.kubernetes.io"].pciBusID == "{address}"'
    return template(name, [request("hpre", "hpre", selector)])


def held_taint(cluster: Cluster, device: str) -> dict[str, Any] | None:
    """The device's held taint in the node's slice, once it has one."""
    taints = slice_devices(cluster).get(device, {}).get("taints", [])
    return next((t for t in taints if t["key"] == HELD_KEY), None)


def unschedulable(cluster: Cluster, pod: str) -> str | None:
    """The scheduler's message once it called the pod unschedulable."""
    for cond in cluster.get("pod", pod).get("status", {}).get("conditions", []):
        if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
            message: str = cond.get("message", "")
            return message
    return None


def dp_holding(cluster: Cluster, pod: str) -> str:
    """The PCI address of the HPRE the kubelet reports the device-plugin pod holding."""
    rows = [r for r in pod_resources(cluster, plugin_exe()) if r["pod"] == pod]
    [row] = [r for r in rows if r["resource"] == HPRE]
    address: str = row["device_id"].partition("::")[0]
    return address


def hpres(tree: FixtureTree) -> list[str]:
    """The tree's HPRE uacce names, sorted."""
    return sorted(n for n in tree.names() if n.startswith("hisi_hpre"))


@pytest.fixture
def cleanup(cluster: Cluster) -> Iterator[None]:
    """Pods and templates of these tests deleted after each."""
    try:
        yield
    finally:
        for pod in PODS:
            cluster.delete_pod(pod, timeout=120)
        for name in TEMPLATES:
            delete_template(cluster, name)


@pytest.mark.timeout(600)
def test_a_device_plugin_pods_device_stays_out_of_dra_until_the_pod_ends(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
    tmp_path: Path,
    cleanup: None,
) -> None:
    """Device plugin -> DRA with a pod holding an HPRE: the DRA pool carries that HPRE with
    the held taint naming the pod, a claim pinned to it waits (the scheduler says
    unschedulable) while a claim pinned to the other HPRE runs; after the holder is deleted the
    taint goes and the pinned claim's pod runs on the device the holder had.

    Seen on 1.37.2: the taint is in the driver's first slice (the publish waits for the
    kubelet's first answer); it was lifted 3.0 s and 17.7 s after the holder's deletion began
    in two runs (the deletion itself, then up to one 5 s ask); with the daemon of before this
    change the claim pinned to the held HPRE was allocated and its pod ran."""
    tree = tree_factory(TREE)
    dp = plugin_factory(tree, "kubelet-socket")
    cluster.apply(manifest(cluster, "kae-dp", {"hpre": 1}, script=SLEEP))
    wait_running(cluster, "kae-dp")
    address = dp_holding(cluster, "kae-dp")
    [held_uacce] = [n for n in hpres(tree) if tree.pci_address(n) == address]
    [free_uacce] = [n for n in hpres(tree) if n != held_uacce]
    held, free = dra_name(tree, held_uacce), dra_name(tree, free_uacce)
    dp.stop()  # the node leaves device-plugin mode; the pod keeps running
    cluster.wait_resources(allocatable={"hpre": 0, "sec": 0, "zip": 0})
    with running_dra_plugin(cluster, tree, tmp_path / "dra") as (_plugin, cdi_dir):
        try:
            wait_until("the whole pool", lambda: len(slice_devices(cluster)) == len(tree.names()))
            taint = wait_until("the held taint", lambda: held_taint(cluster, held))
            assert taint["value"] == "default.kae-dp" and taint["effect"] == "NoSchedule", taint
            assert held_taint(cluster, free) is None
            cluster.apply(pinned("kae-pinned-hpre", address))
            cluster.apply(claim_pod(cluster, "kae-pinned", "kae-pinned-hpre", script=SLEEP))
            cluster.apply(pinned("kae-other-hpre", tree.pci_address(free_uacce)))
            cluster.apply(claim_pod(cluster, "kae-other", "kae-other-hpre", script=SLEEP))
            wait_running(cluster, "kae-other", timeout=120)
            assert allocated(pod_claim(cluster, "kae-other")) == [free]
            wait_until(
                "the pinned claim unschedulable", lambda: unschedulable(cluster, "kae-pinned")
            )
            assert not allocated(pod_claim(cluster, "kae-pinned"))
            assert cluster.get("pod", "kae-dp")["status"]["phase"] == "Running"

            deleted = time.monotonic()
            cluster.delete_pod("kae-dp")
            wait_until("the held taint lifted", lambda: held_taint(cluster, held) is None, 60)
            lifted = time.monotonic() - deleted
            wait_running(cluster, "kae-pinned", timeout=180)
            assert allocated(pod_claim(cluster, "kae-pinned")) == [held]
            print(f"held taint lifted {lifted:.1f} s after the holder's deletion began")
        finally:
            for pod in ("kae-pinned", "kae-other"):
                cluster.delete_pod(pod)
            wait_until("every claim unprepared", lambda: not cdi_specs(cdi_dir), timeout=90)


KUBELET_LOG = Path(os.environ.get("KAE_E2E_STATE", "/var/tmp/kae-e2e")) / "logs" / "kubelet.log"


def unprepare_refused(uid: str) -> bool:
    """The kubelet logged that it could not unprepare the pod's claims (no driver): it has
    stopped the pod's containers and now retries, holding the pod in Terminating."""
    text = KUBELET_LOG.read_text(errors="replace")
    return any(
        "unprepare dynamic resources" in line and "not registered" in line and uid in line
        for line in text.splitlines()
    )


def present(cluster: Cluster, pod: str) -> bool:
    """The pod object exists (deleted or not)."""
    return bool(cluster.kubectl("get", "pod", pod, "--ignore-not-found", "-o", "name"))


def terminating(cluster: Cluster, pod: str) -> bool:
    """The pod object is still there, marked for deletion."""
    found = cluster.kubectl("get", "pod", pod, "--ignore-not-found", "-o", "json")
    return bool(found) and "deletionTimestamp" in json.loads(found)["metadata"]


def claim_pod_held(cluster: Cluster, tree: FixtureTree, workdir: Path, address: str) -> Path:
    """In DRA mode, the claim pod ``kae-dra`` (a 1 s grace period: 0 lets the API server drop
    the object at once) running on the HPRE at ``address``; the driver then stops. The CDI dir."""
    with running_dra_plugin(cluster, tree, workdir) as (_plugin, cdi_dir):
        wait_until("the whole pool", lambda: len(slice_devices(cluster)) == len(tree.names()))
        cluster.apply(pinned("kae-dra-hpre", address))
        pod = claim_pod(cluster, "kae-dra", "kae-dra-hpre", script=SLEEP)
        pod["spec"]["terminationGracePeriodSeconds"] = 1
        cluster.apply(pod)
        wait_running(cluster, "kae-dra", timeout=120)
        [device] = allocated(pod_claim(cluster, "kae-dra"))
        assert address.replace(":", "-").replace(".", "-") in device
    return cdi_dir


@pytest.mark.timeout(600)
def test_a_dra_claims_device_stays_out_of_the_device_plugin_until_unprepared(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
    tmp_path: Path,
    cleanup: None,
) -> None:
    """DRA -> device plugin with a claim pod holding an HPRE: the device plugin advertises it
    Unhealthy (allocatable hpre 1 of 2) and a device-plugin pod gets the other HPRE (with the
    daemon of before this change allocatable stayed 2).

    The claim pod deleted with no DRA driver on the node (seen on 1.37.2): the kubelet stops
    its containers, then fails to unprepare ("DRA driver kae.openfuyao.com is not registered",
    retried every 2 s) and keeps the pod Terminating (over 3 minutes in one run) and in its
    pod-resources answer, so the device stays out of allocatable: the claim is still prepared.
    A DRA driver back on the node is asked to unprepare at once: the CDI spec and the pod
    object were gone 0.9-1.2 s after it registered, and allocatable is 2 again. With a 0 s
    grace period the API server drops the pod object at once: pod-resources stops listing it
    and the device came back 4.3 s after the deletion, while the kubelet kept retrying the
    unprepare and the spec and checkpoint entry stayed until a driver came back."""
    tree = tree_factory(TREE)
    held_uacce, free_uacce = hpres(tree)
    everything = {"hpre": 2, "sec": 2, "zip": 2}
    try:
        cdi_dir = claim_pod_held(cluster, tree, tmp_path / "dra", tree.pci_address(held_uacce))
        specs = cdi_specs(cdi_dir)
        uid = cluster.get("pod", "kae-dra")["metadata"]["uid"]
        plugin_factory(tree, "kubelet-socket")  # the node is in device-plugin mode now
        cluster.wait_resources(capacity=everything, allocatable={**everything, "hpre": 1})
        cluster.apply(manifest(cluster, "kae-dp-other", {"hpre": 1}, script=SLEEP))
        wait_running(cluster, "kae-dp-other")
        assert dp_holding(cluster, "kae-dp-other") == tree.pci_address(free_uacce)
        assert cluster.get("pod", "kae-dra")["status"]["phase"] == "Running"

        cluster.kubectl("delete", "pod", "kae-dra", "--wait=false")
        wait_until("the kubelet refusing to unprepare", lambda: unprepare_refused(uid), 60)
        assert terminating(cluster, "kae-dra")
        assert cluster.node_resources()[1]["hpre"] == 1
        assert all(spec.exists() for spec in specs)
    finally:
        # A DRA driver back on the node: the kubelet unprepares, the pod object goes (deleted
        # here too when the test failed before it did).
        if present(cluster, "kae-dra"):
            cluster.kubectl("delete", "pod", "kae-dra", "--wait=false")
            with running_dra_plugin(cluster, tree, tmp_path / "dra-again") as (_p, cdi_dir):
                returned = time.monotonic()
                wait_until("the claim unprepared", lambda: not cdi_specs(cdi_dir), timeout=90)
                wait_until("the pod object gone", lambda: not present(cluster, "kae-dra"), 90)
                print(f"unprepared and gone {time.monotonic() - returned:.1f} s after the driver")
    cluster.wait_resources(allocatable=everything, timeout=60)
