"""DRA where the API server lacks a feature the driver would use: the driver degrades by itself,
once, with no write loop and no feature half on.

On Kubernetes 1.34 and 1.35 device taints (DRADeviceTaints) and consumable capacity
(DRAConsumableCapacity) are alpha, off by default, and the API server drops those fields from a
slice without an error. Seen on the 1.34.4 cell: the driver logs which fields were not kept,
leaves an unhealthy device out of the pool instead of tainting it, and publishes a shared
engine whole (no sharing), each in one write, the slice's resourceVersion then unchanged. These
tests run only there (they skip with the reason on 1.36 and later, where test_dra_taints_sharing
shows the features themselves).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, FixtureTree, Plugin, wait_until
from tests.e2e.dra import (
    SLEEP,
    DraDrivers,
    claim_pod,
    delete_template,
    dra_name,
    request,
    slice_devices,
    slices,
    template,
)
from tests.e2e.pods import read_report, wait_running

pytestmark = pytest.mark.needs("dra", "cdi")

TREE = "kunpeng920-2p"
ONE_ZIP = template("kae-whole-zip", [request("zip", "zip")])
PODS = ("kae-whole-1", "kae-whole-2", "kae-whole-3")
# How long the pool is watched for a write nobody asked for.
QUIET = 10.0


def versions(cluster: Cluster) -> list[str]:
    """The resourceVersions of the node's slices."""
    return [s["metadata"]["resourceVersion"] for s in slices(cluster)]


def quiet(cluster: Cluster) -> list[str]:
    """The slices' resourceVersions, asserted unchanged for QUIET seconds (no write loop)."""
    before = versions(cluster)
    time.sleep(QUIET)
    after = versions(cluster)
    assert after == before, f"the driver kept writing: {before} -> {after}"
    return after


@pytest.fixture
def driver(
    cluster: Cluster, tree_factory: Callable[[str], FixtureTree], tmp_path: Path
) -> Iterator[Callable[[list[str]], tuple[Plugin, FixtureTree]]]:
    """Starts the DRA daemon (with extra flags) on the two-socket tree; pods and the template
    are removed, and the claims unprepared, before it stops."""
    drivers = DraDrivers(cluster, tree_factory, tmp_path, TREE)
    try:
        yield drivers.start
    finally:
        for pod in PODS:
            cluster.delete_pod(pod)
        delete_template(cluster, "kae-whole-zip")
        drivers.close()


@pytest.mark.needs("dra-taints-dropped")
@pytest.mark.timeout(300)
def test_where_taints_are_dropped_an_unhealthy_device_leaves_the_pool_in_one_write(
    cluster: Cluster, driver: Callable[[list[str]], tuple[Plugin, FixtureTree]]
) -> None:
    """isolate=1 on a free ZIP where the API server drops taints: the driver logs that
    spec.devices[].taints was not kept and that unhealthy devices are left out; the ZIP leaves
    the slice (five devices), carries no taint anywhere, and the slice is then left alone;
    isolate=0 brings it back (six). Seen on 1.34.4: one write each way."""
    plugin, tree = driver([])
    zip_name = next(n for n in tree.names() if n.startswith("hisi_zip"))
    device = dra_name(tree, zip_name)
    quiet(cluster)
    tree.attr(zip_name, "isolate").write_text("1\n")
    wait_until(f"{device} left out", lambda: device not in slice_devices(cluster))
    assert len(slice_devices(cluster)) == len(tree.names()) - 1
    assert not any(d.get("taints") for d in slice_devices(cluster).values())
    log = plugin.log_text()
    assert "did not keep spec.devices[].taints" in log, log
    assert "unhealthy devices are left out of the pool" in log, log
    quiet(cluster)
    tree.attr(zip_name, "isolate").write_text("0\n")
    wait_until(f"{device} back", lambda: device in slice_devices(cluster))
    quiet(cluster)


@pytest.mark.needs("dra-consumable-capacity-dropped")
@pytest.mark.timeout(420)
def test_where_consumable_capacity_is_dropped_a_shared_zip_is_served_whole(
    cluster: Cluster, driver: Callable[[list[str]], tuple[Plugin, FixtureTree]]
) -> None:
    """`--shared-engines zip` where the API server drops consumable capacity: the driver logs
    that allowMultipleAllocations and the queues' requestPolicy were not kept, the slice
    carries neither and is left alone; two claims of one ZIP each get the tree's two ZIPs
    whole (no KAE_ZIP_QUEUES: not a share) and a third stays unschedulable. Seen on 1.34.4."""
    plugin, _tree = driver(["--shared-engines", "zip"])
    quiet(cluster)
    log = plugin.log_text()
    assert "did not keep spec.devices[].allowMultipleAllocations" in log, log
    assert "did not keep spec.devices[].capacity.queues.requestPolicy" in log, log
    zips = {n: d for n, d in slice_devices(cluster).items() if n.startswith("zip")}
    assert len(zips) == 2 and not any("allowMultipleAllocations" in d for d in zips.values())
    cluster.apply(ONE_ZIP)
    seen: set[str] = set()
    for pod in PODS[:2]:
        cluster.apply(claim_pod(cluster, pod, "kae-whole-zip"))
        wait_running(cluster, pod, timeout=120)
        report = read_report(cluster, pod)
        [name] = report.dev
        assert name.startswith("hisi_zip") and "KAE_ZIP_QUEUES" not in report.env, report
        seen.add(name)
    assert len(seen) == 2, seen
    cluster.apply(claim_pod(cluster, PODS[2], "kae-whole-zip", script=SLEEP))
    wait_until(
        "the third claim unschedulable",
        lambda: any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in cluster.get("pod", PODS[2]).get("status", {}).get("conditions", [])
        ),
    )
