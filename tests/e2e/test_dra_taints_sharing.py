"""Past plain DRA, on the real cluster (issue 21), the daemon as a host process: an unhealthy
device stays in its slice with the `kae.openfuyao.com/unhealthy` taint, which keeps new claims
off it while its holder runs and is told in its status, and is lifted on recovery; and a ZIP
shared as consumable capacity serves two claims of 8 queues each while a third that would
over-commit it waits."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import Cluster, FixtureTree, Plugin, wait_until
from tests.e2e.dra import (
    DRIVER,
    SLEEP,
    DraDrivers,
    allocated,
    claim_pod,
    delete_template,
    dra_name,
    health_of,
    pod_claim,
    request,
    slice_devices,
    template,
    uacce_of,
)
from tests.e2e.pods import read_report, wait_running

pytestmark = pytest.mark.needs("dra", "cdi")

TREE = "kunpeng920-2p"
PODS = ("kae-held", "kae-pinned", "kae-other", "kae-q1", "kae-q2", "kae-q3")
TEMPLATES = ("kae-any-hpre", "kae-pinned-zip", "kae-any-zip", "kae-q8", "kae-qmany")
TAINT = f"{DRIVER}/unhealthy"
_UNITS = {"": 1, "k": 1000, "Ki": 1024}


def quantity(text: str) -> int:
    """An integer resource quantity as the API server writes it (``1024``, ``4k``, ``1Ki``)."""
    match = re.fullmatch(r"(\d+)(k|Ki)?", text)
    assert match, text
    return int(match[1]) * _UNITS[match[2] or ""]


def pinned(name: str, device: str, address: str, **exactly: Any) -> dict[str, Any]:
    """A template asking one ZIP, exactly the one at PCI `address`."""
    selector = f'device.attributes["resource.kubernetes.io"].pciBusID == "{address}"'
    return template(name, [request(device, "zip", selector, **exactly)])


def taints(cluster: Cluster, device: str) -> list[dict[str, Any]]:
    """The taints the node's slice gives `device`."""
    found: list[dict[str, Any]] = slice_devices(cluster).get(device, {}).get("taints", [])
    return found


def tainted(cluster: Cluster, device: str) -> list[dict[str, Any]] | None:
    """The device's taints once it has any (None before: wait_until takes [] as an answer)."""
    return taints(cluster, device) or None


def untainted(cluster: Cluster, device: str) -> bool:
    """The device is published with no taint."""
    return device in slice_devices(cluster) and not taints(cluster, device)


def unschedulable(cluster: Cluster, pod: str) -> bool:
    """The scheduler reported the pod unschedulable."""
    conditions = cluster.get("pod", pod).get("status", {}).get("conditions", [])
    return any(
        c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


@pytest.fixture
def driver(
    cluster: Cluster, tree_factory: Callable[[str], FixtureTree], tmp_path: Path
) -> Iterator[Callable[[list[str]], tuple[Plugin, FixtureTree]]]:
    """Starts the DRA daemon (with extra flags) on the two-socket tree; pods, templates and the
    daemon are removed after the test (the claims unprepared first)."""
    drivers = DraDrivers(cluster, tree_factory, tmp_path, TREE)
    try:
        yield drivers.start
    finally:
        for pod in PODS:
            cluster.delete_pod(pod)
        for name in TEMPLATES:
            delete_template(cluster, name)
        drivers.close()


@pytest.mark.needs("dra-taints", "pod-health")
@pytest.mark.timeout(420)
def test_an_unhealthy_device_is_tainted_kept_and_lifted(
    cluster: Cluster, driver: Callable[[list[str]], tuple[Plugin, FixtureTree]]
) -> None:
    """Isolating the HPRE a pod holds taints it (NoSchedule, value `isolated`) and makes the
    pod's status say Unhealthy while it keeps running; an isolated free ZIP is skipped by a claim
    that has another choice and keeps a claim pinned to it pending. Recovery lifts both taints,
    the holder's status says Healthy and the pinned claim is then allocated."""
    _plugin, tree = driver([])
    cluster.apply(template("kae-any-hpre", [request("hpre", "hpre")]))
    cluster.apply(claim_pod(cluster, "kae-held", "kae-any-hpre", script=SLEEP))
    wait_running(cluster, "kae-held", timeout=120)
    [held] = allocated(pod_claim(cluster, "kae-held"))
    zips = sorted(dra_name(tree, n) for n in tree.names() if n.startswith("hisi_zip"))
    sick_zip, good_zip = zips
    isolates = [tree.attr(uacce_of(tree, d), "isolate") for d in (held, sick_zip)]
    for path in isolates:
        path.write_text("1\n")
    for device in (held, sick_zip):
        [taint] = wait_until(f"{device} tainted", partial(tainted, cluster, device))
        assert taint["key"] == TAINT and taint["effect"] == "NoSchedule", taint
        assert taint["value"] == "isolated", taint
    assert set(slice_devices(cluster)) == {dra_name(tree, n) for n in tree.names()}
    wait_until(
        "Unhealthy in the holder's status",
        lambda: health_of(cluster, "kae-held", held) == "Unhealthy",
    )
    address = tree.pci_address(uacce_of(tree, sick_zip))
    cluster.apply(pinned("kae-pinned-zip", "zip", address))
    cluster.apply(claim_pod(cluster, "kae-pinned", "kae-pinned-zip", script=SLEEP))
    cluster.apply(template("kae-any-zip", [request("zip", "zip")]))
    cluster.apply(claim_pod(cluster, "kae-other", "kae-any-zip", script=SLEEP))
    wait_running(cluster, "kae-other", timeout=120)
    assert allocated(pod_claim(cluster, "kae-other")) == [good_zip]
    wait_until("the pinned claim unschedulable", lambda: unschedulable(cluster, "kae-pinned"))
    assert cluster.get("pod", "kae-held")["status"]["phase"] == "Running"

    for path in isolates:
        path.write_text("0\n")
    for device in (held, sick_zip):
        wait_until(f"{device}'s taint lifted", partial(untainted, cluster, device))
    wait_until(
        "Healthy in the holder's status", lambda: health_of(cluster, "kae-held", held) == "Healthy"
    )
    wait_running(cluster, "kae-pinned", timeout=180)
    assert allocated(pod_claim(cluster, "kae-pinned")) == [sick_zip]


@pytest.mark.needs("dra-consumable-capacity")
@pytest.mark.timeout(420)
def test_two_claims_share_one_zip_by_queues_and_a_third_waits(
    cluster: Cluster, driver: Callable[[list[str]], tuple[Plugin, FixtureTree]]
) -> None:
    """`--shared-engines zip`: two pods whose claims ask 8 queues of the same ZIP both run on
    it, each told KAE_ZIP_QUEUES=8; a third asking more than the queues left waits."""
    _plugin, tree = driver(["--shared-engines", "zip"])
    zip_name = min(n for n in tree.names() if n.startswith("hisi_zip"))
    device = dra_name(tree, zip_name)
    published = slice_devices(cluster)[device]
    assert published.get("allowMultipleAllocations") is True, published
    total = quantity(published["capacity"]["queues"]["value"])
    address = tree.pci_address(zip_name)
    eight = {"capacity": {"requests": {"queues": "8"}}}
    cluster.apply(pinned("kae-q8", "zip", address, **eight))
    for pod in ("kae-q1", "kae-q2"):
        cluster.apply(claim_pod(cluster, pod, "kae-q8"))
        wait_running(cluster, pod, timeout=120)
        claim = pod_claim(cluster, pod)
        assert allocated(claim) == [device], claim
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert result.get("shareID"), result
        assert quantity(result["consumedCapacity"]["queues"]) == 8, result
        report = read_report(cluster, pod)
        assert report.env.get("KAE_ZIP_QUEUES") == "8", report
        assert report.dev == {zip_name}, report
    too_many = {"capacity": {"requests": {"queues": str(total - 16 + 1)}}}
    cluster.apply(pinned("kae-qmany", "zip", address, **too_many))
    cluster.apply(claim_pod(cluster, "kae-q3", "kae-qmany", script=SLEEP))
    wait_until("the over-committing claim unschedulable", lambda: unschedulable(cluster, "kae-q3"))
