"""DRA on a runtime that applies no CDI devices: found, not suffered.

DRA gives a container its devices only as CDI device IDs. containerd 1.7 with its default
``enable_cdi = false`` creates the container without them and says nothing above debug level.
The driver, a host process here as in the other DRA modules, reads its Node's
``containerRuntimeVersion`` and the cluster's containerd config (``--runtime-config``): with CDI
off it publishes an empty pool, refuses every prepare naming the setting, and ``/readyz`` names
it; with CDI on it publishes the tree and a claim's pod runs with its device.

Run on the cells ``KAE_E2E_CONTAINERD=1.7.35 KAE_E2E_CDI=off`` (the first two tests) and any cell
whose runtime applies CDI (the last); each skips elsewhere with the reason.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import Cluster, FixtureTree, Plugin, wait_until
from tests.e2e.dra import (
    DRIVER,
    SLEEP,
    cdi_specs,
    claim_pod,
    delete_template,
    dra_name,
    request,
    running_dra_plugin,
    slices,
    template,
)
from tests.e2e.pods import iter_events, read_report, wait_running

TREE = "kunpeng920-2p"
ONE_ZIP = template("kae-one-zip", [request("zip", "zip")])
FIX = "enable_cdi = true"
# How long a pod that must not start is watched after the refusal was seen.
HOLD = 20.0


@pytest.fixture
def tree(tree_factory: Callable[[str], FixtureTree]) -> FixtureTree:
    return tree_factory(TREE)


@pytest.fixture
def refusing_driver(
    cluster: Cluster, tree: FixtureTree, tmp_path: Path
) -> Iterator[tuple[Plugin, Path]]:
    """The DRA driver on a CDI-off runtime: never ready, so not waited for."""
    with running_dra_plugin(cluster, tree, tmp_path, ready=False) as (plugin, cdi_dir):
        yield plugin, cdi_dir


def refusal(plugin: Plugin) -> str | None:
    """/readyz's body once it names the CDI setting."""
    status, body = plugin.readyz()
    return body if status == 503 and FIX in body else None


def never_starts(cluster: Cluster, pod: str, cdi_dir: Path) -> dict[str, Any]:
    """The pod stays Pending with no container started and no CDI spec written, for HOLD
    seconds; its last status."""
    deadline = time.monotonic() + HOLD
    while True:
        status: dict[str, Any] = cluster.get("pod", pod).get("status", {})
        assert status.get("phase") == "Pending", status
        containers = status.get("containerStatuses", [])
        assert not [c for c in containers if "running" in c.get("state", {})], status
        assert cdi_specs(cdi_dir) == [], cdi_specs(cdi_dir)
        if time.monotonic() >= deadline:
            return status
        time.sleep(1)


@pytest.mark.needs("dra", "cdi-off")
@pytest.mark.timeout(300)
def test_an_empty_pool_says_why_and_a_claims_pod_stays_pending(
    cluster: Cluster, tree: FixtureTree, refusing_driver: tuple[Plugin, Path]
) -> None:
    """containerd 1.7.35 with enable_cdi = false under the driver given its config: /readyz is
    503 naming containerd 1.7.35, the setting and the config file; the log says no device is
    published and why; the node's pool is one slice with no device though the tree has six;
    a pod whose claim asks one ZIP stays Pending, unschedulable by the scheduler's word, with
    no container and no CDI spec; a restarted driver leaves the empty slice as it is."""
    plugin, cdi_dir = refusing_driver
    body = wait_until("/readyz naming the CDI setting", lambda: refusal(plugin))
    assert f"containerd {cluster.stack.containerd}" in body, body
    assert str(cluster.runtime_config) in body, body
    assert "device-plugin mode" in body, body
    assert "no KAE device is published and every claim is refused" in plugin.log_text()
    [published] = wait_until("the node's slice", lambda: slices(cluster) or None)
    assert published["spec"]["pool"]["name"] == cluster.node
    assert not published["spec"].get("devices"), published  # null from 1.34, absent from 1.37
    assert len(tree.names()) == 6
    cluster.apply(ONE_ZIP)
    try:
        cluster.apply(claim_pod(cluster, "kae-no-cdi", "kae-one-zip", script=SLEEP))
        wait_until(
            "the scheduler's Unschedulable",
            lambda: any(
                c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in cluster.get("pod", "kae-no-cdi").get("status", {}).get("conditions", [])
            ),
        )
        status = never_starts(cluster, "kae-no-cdi", cdi_dir)
        assert not status.get("containerStatuses"), status
        assert refusal(plugin) is not None  # still says why
        # A restarted driver finds its empty pool as the server keeps it and writes nothing.
        version = published["metadata"]["resourceVersion"]
        plugin.restart()
        wait_until("/readyz naming the CDI setting again", lambda: refusal(plugin))
        time.sleep(HOLD / 2)
        [again] = slices(cluster)
        assert again["metadata"]["resourceVersion"] == version, again
        assert "Traceback" not in plugin.log_text(), plugin.log_text()
    finally:
        cluster.delete_pod("kae-no-cdi")
        delete_template(cluster, "kae-one-zip")


@pytest.mark.needs("dra", "cdi-off")
@pytest.mark.timeout(300)
def test_a_claim_allocated_anyway_is_refused_at_prepare_and_its_pod_never_starts(
    cluster: Cluster, tree: FixtureTree, refusing_driver: tuple[Plugin, Path]
) -> None:
    """The second guard, should a claim be allocated a device of this node all the same (a
    slice published before containerd lost CDI, an allocation written by hand): a claim whose
    status allocates a ZIP of the pool and reserves it for a pod bound to the node. The kubelet
    asks the driver to prepare it, the driver refuses naming enable_cdi (the pod's
    FailedPrepareDynamicResources event carries it), and the pod stays Pending with no
    container and no CDI spec."""
    plugin, cdi_dir = refusing_driver
    wait_until("/readyz naming the CDI setting", lambda: refusal(plugin))
    zip_device = dra_name(tree, next(n for n in tree.names() if n.startswith("hisi_zip")))
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "kae-forced", "namespace": "default"},
        "spec": {"devices": {"requests": [request("zip", "zip")]}},
    }
    pod = claim_pod(cluster, "kae-forced", "unused")  # it reports what it sees, if it runs
    pod["spec"]["resourceClaims"] = [{"name": "kae", "resourceClaimName": "kae-forced"}]
    pod["spec"]["nodeName"] = cluster.node
    try:
        cluster.apply(claim)
        cluster.apply(pod)
        uid = cluster.get("pod", "kae-forced")["metadata"]["uid"]
        allocation = {
            "devices": {
                "results": [
                    {"request": "zip", "driver": DRIVER, "pool": cluster.node, "device": zip_device}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [cluster.node]}
                        ]
                    }
                ]
            },
        }
        reserved = [{"resource": "pods", "name": "kae-forced", "uid": uid}]
        cluster.kubectl(
            "patch", "resourceclaim", "kae-forced", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"allocation": allocation, "reservedFor": reserved}}),
        )  # fmt: skip
        stored = cluster.get("resourceclaim", "kae-forced")["status"]
        assert stored["allocation"]["devices"]["results"][0]["device"] == zip_device, stored

        def refused() -> str | None:
            if cluster.get("pod", "kae-forced").get("status", {}).get("phase") == "Running":
                seen = read_report(cluster, "kae-forced")
                raise AssertionError(f"the pod started without its device; it saw {seen}")
            return next((e for e in iter_events(cluster, "kae-forced") if FIX in e), None)

        event = wait_until("the kubelet's prepare failure naming the setting", refused, 120)
        assert "FailedPrepareDynamicResources" in event or "prepare" in event.lower(), event
        never_starts(cluster, "kae-forced", cdi_dir)
        assert "refus" in plugin.log_text().lower()
    finally:
        cluster.delete_pod("kae-forced")
        cluster.kubectl("delete", "resourceclaim", "kae-forced", "--ignore-not-found", check=False)


@pytest.mark.needs("dra", "cdi")
@pytest.mark.timeout(300)
def test_a_runtime_that_applies_cdi_gets_the_pool_and_the_claim_runs_with_its_device(
    cluster: Cluster, tree: FixtureTree, tmp_path: Path
) -> None:
    """The same driver and claim where the runtime applies CDI (containerd 1.7.35 with
    enable_cdi = true in the config the driver reads, or containerd 2): /readyz is 200, the pool
    holds the tree's six devices, and the claim's pod runs seeing exactly its one ZIP through
    the CDI spec the runtime applied."""
    with running_dra_plugin(cluster, tree, tmp_path) as (plugin, cdi_dir):
        status, body = plugin.readyz()
        assert (status, body.strip()) == (200, "ready"), body
        [published] = wait_until("the node's slice", lambda: slices(cluster) or None)
        assert len(published["spec"]["devices"]) == 6, published
        cluster.apply(ONE_ZIP)
        try:
            cluster.apply(claim_pod(cluster, "kae-cdi-on", "kae-one-zip"))
            wait_running(cluster, "kae-cdi-on", timeout=120)
            report = read_report(cluster, "kae-cdi-on")
            [name] = report.dev
            assert name.startswith("hisi_zip") and report.env["KAE_ZIP_DEVICES"] == name, report
            assert set(report.readable) == {name}, report
            assert report.dangling == set(tree.names()) - {name}, report
            assert cdi_specs(cdi_dir), "no claim CDI spec"
        finally:
            cluster.delete_pod("kae-cdi-on")
            delete_template(cluster, "kae-one-zip")
