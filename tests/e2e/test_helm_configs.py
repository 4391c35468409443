"""Per-node configurations on the real cluster: the chart installed with a named configuration
(`configs: {shared-hpre: ...}`, two shares per HPRE) runs one DaemonSet per configuration; a node
labelled `openfuyao.com/kae.config=shared-hpre` is served by that configuration's pod alone (the
node advertises two HPRE shares per device), and removing the label hands it back to the default
DaemonSet (one share per device). No node is ever served by two pods."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.cluster import Cluster, FixtureTree, wait_until
from tests.e2e.helm import Release, chart_values
from tests.e2e.test_helm import helm_binary, plugin_image

__all__ = ["helm_binary", "plugin_image"]  # module fixtures shared with test_helm.py

TREE = "kunpeng920-2p"
NAMESPACE = "kae-configs"
CONFIG = "shared-hpre"
LABEL = "openfuyao.com/kae.config"


@pytest.fixture(scope="module")
def release(
    cluster: Cluster, helm_binary: str, plugin_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Release, FixtureTree]]:
    """The chart with one named configuration; uninstalled, the label and namespace removed."""
    base = tmp_path_factory.mktemp("configs")
    tree = FixtureTree.copy(TREE, base)
    values = chart_values(cluster, tree, plugin_image, base / "host")
    values["configs"] = {CONFIG: {"engines": {"hpre": {"shares": 2}}}}
    path = base / "values.json"
    path.write_text(json.dumps(values))
    installed = Release(helm_binary, cluster, "kae-cfg", NAMESPACE)
    installed.install(path)
    try:
        yield installed, tree
    finally:
        installed.uninstall()
        cluster.kubectl("label", "node", cluster.node, f"{LABEL}-", check=False)
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true")
        cluster.wait_resources(allocatable={"hpre": 0, "sec": 0, "zip": 0})


def serving(release: Release) -> dict[str, Any] | None:
    """The one Ready plugin pod of the release (None while there is none, or several)."""
    pods = release.pods()
    if len(pods) != 1:
        return None
    ready = any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pods[0].get("status", {}).get("conditions", [])
    )
    return pods[0] if ready else None


def daemonset_of(pod: dict[str, Any]) -> str:
    """The DaemonSet that owns a pod."""
    [owner] = pod["metadata"]["ownerReferences"]
    name: str = owner["name"]
    return name


def served_by(release: Release, daemonset: str, same: bool) -> dict[str, Any] | None:
    """The one Ready pod when it is (same) or is not (not same) of `daemonset`."""
    pod = serving(release)
    if pod is None or (daemonset_of(pod) == daemonset) != same:
        return None
    return pod


@pytest.mark.timeout(600)
def test_a_labelled_node_is_served_by_its_configuration_alone_and_back(
    cluster: Cluster, release: tuple[Release, FixtureTree]
) -> None:
    """Unlabelled: the default DaemonSet serves the node (1 share per HPRE). Labelled: that
    pod goes, the configuration's DaemonSet serves it (2 shares). Unlabelled again: back."""
    chart, tree = release
    counts = tree.counts()
    names = {d["metadata"]["name"] for d in cluster.get("daemonsets", "-n", NAMESPACE)["items"]}
    assert len(names) == 2 and any(n.endswith(f"-{CONFIG}") for n in names), names
    default = daemonset_of(wait_until("the default pod Ready", lambda: serving(chart), 180))
    cluster.wait_resources(capacity=counts, allocatable=counts, timeout=120)

    cluster.kubectl("label", "node", cluster.node, f"{LABEL}={CONFIG}", "--overwrite")
    pod = wait_until("the configuration's pod alone", lambda: served_by(chart, default, False), 180)
    assert daemonset_of(pod).endswith(f"-{CONFIG}")
    shared = {**counts, "hpre": counts["hpre"] * 2}
    cluster.wait_resources(capacity=shared, allocatable=shared, timeout=120)

    cluster.kubectl("label", "node", cluster.node, f"{LABEL}-")
    wait_until("the default pod back, alone", lambda: served_by(chart, default, True), 180)
    cluster.wait_resources(capacity=counts, allocatable=counts, timeout=120)
