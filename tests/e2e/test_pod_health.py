"""Health that reaches the pod, device-plugin mode, on the real kubelet: a held device that turns
Unhealthy in ListAndWatch shows as Unhealthy in the pod's
status.containerStatuses[].allocatedResourcesStatus (ResourceHealthStatus, on by default in 1.37),
and Healthy again once it recovers. What `kubectl get pod -o jsonpath=...` shows an operator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.cluster import PREFIX, Cluster, FixtureTree, Plugin, wait_until
from tests.e2e.pods import manifest, wait_running

TREE = "kunpeng920-2p"
SLEEP = "sleep 3600"


def resource_health(cluster: Cluster, pod: str) -> dict[str, str]:
    """resourceID -> health of the pod's first container, as the kubelet reports it."""
    status: dict[str, Any] = cluster.get("pod", pod).get("status", {})
    found: dict[str, str] = {}
    for container in status.get("containerStatuses", []):
        for entry in container.get("allocatedResourcesStatus") or []:
            if entry.get("name", "").startswith(PREFIX):
                for res in entry.get("resources") or []:
                    found[res["resourceID"]] = res.get("health", "")
    return found


@pytest.mark.needs("pod-health")
@pytest.mark.timeout(300)
def test_an_isolated_device_is_unhealthy_in_its_pods_status_until_it_recovers(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
) -> None:
    """isolate=1 on the device a running pod holds: the pod's allocatedResourcesStatus says
    Unhealthy for that device ID; isolate=0: Healthy again. The pod keeps running throughout."""
    tree = tree_factory(TREE)
    plugin_factory(tree, "kubelet-socket")
    cluster.wait_resources(capacity=tree.counts(), allocatable=tree.counts())
    try:
        cluster.apply(manifest(cluster, "kae-health", {"zip": 1}, script=SLEEP))
        wait_running(cluster, "kae-health")
        [(device_id, health)] = wait_until(
            "the held device reported", lambda: list(resource_health(cluster, "kae-health").items())
        )
        assert health == "Healthy"
        name = next(n for n in tree.names() if tree.pci_address(n) == device_id)
        tree.attr(name, "isolate").write_text("1\n")
        wait_until(
            "Unhealthy in the pod's status",
            lambda: resource_health(cluster, "kae-health").get(device_id) == "Unhealthy",
            timeout=60,
        )
        tree.attr(name, "isolate").write_text("0\n")
        wait_until(
            "Healthy again in the pod's status",
            lambda: resource_health(cluster, "kae-health").get(device_id) == "Healthy",
            timeout=60,
        )
        assert cluster.get("pod", "kae-health")["status"]["phase"] == "Running"
    finally:
        cluster.delete_pod("kae-health")
