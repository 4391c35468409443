"""NFD on the real cluster: nfd-worker reads the plugin's feature file and nfd-master puts its
labels on the node, following the hardware; the chart's NodeFeatureRule is accepted by the API
server with NFD's own CRDs installed (scripts/cluster/up starts both NFD daemons)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kae_deviceplugin.discovery.node_facts import read_node_facts
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.observability import nfd
from tests.e2e.cluster import REPO, Cluster, FixtureTree, Plugin, wait_until

# Fixed in nfd-worker's code, hence the host's directory (scripts/cluster/lib.sh says the same).
FEATURES_DIR = Path("/etc/kubernetes/node-feature-discovery/features.d")
KAE_LABELS = nfd.LABEL_PREFIX + "kae"
CHART = REPO / "deploy" / "helm" / "kae-device-plugin"


def kae_labels(cluster: Cluster) -> dict[str, str]:
    """The node's labels that our feature file can have given it."""
    labels: dict[str, str] = cluster.get("node", cluster.node)["metadata"].get("labels", {})
    return {k: v for k, v in labels.items() if k.startswith(KAE_LABELS)}


def file_labels(path: Path) -> dict[str, str] | None:
    """The labels in the plugin's feature file, None while it is not there."""
    try:
        labels, _ = nfd.parse(path.read_text())
    except FileNotFoundError:
        return None
    return labels


def tree_labels(tree: FixtureTree) -> dict[str, str]:
    """The labels the plugin writes for ``tree``: its hardware and the node's facts."""
    inventory = scan(tree.sys, tree.dev)
    return nfd.feature_labels(inventory, read_node_facts(tree.sys, inventory))


def wait_labels(cluster: Cluster, wanted: dict[str, str], timeout: float = 60.0) -> None:
    """Wait until the node's kae labels are exactly `wanted`."""
    try:
        wait_until("node kae labels", lambda: kae_labels(cluster) == wanted, timeout)
    except AssertionError:
        raise AssertionError(f"node has {kae_labels(cluster)}, wanted {wanted}") from None


@pytest.fixture
def features_file() -> Iterator[Path]:
    """A feature file of this test's own in nfd-worker's directory, removed at the end."""
    path = FEATURES_DIR / f"kae-e2e-{uuid.uuid4().hex[:8]}"
    yield path
    path.unlink(missing_ok=True)


def test_nfd_labels_the_node_from_the_plugins_feature_file(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
    features_file: Path,
) -> None:
    """The plugin writes its feature file; nfd-worker and nfd-master give the node exactly the
    labels of the tree's hardware (kae.present; per engine present, api, algorithms, pfs, vfs)
    and of the node's facts (per engine sva, uacce-mode, pf-q-num, driver-provenance).
    Removing every HPRE device drops the hpre labels from the node but for the likely cause
    (its PFs are still bound: no-uacce); without the file the kae labels go."""
    assert kae_labels(cluster) == {}, "kae labels left on the node by an earlier run"
    tree = tree_factory("kunpeng920-2p")
    labels = tree_labels(tree)
    assert labels[nfd.LABEL_PREFIX + "kae-hpre.pfs"] == "2", labels
    assert labels[nfd.LABEL_PREFIX + "kae-hpre.driver-provenance"] == "out-of-tree", labels
    plugin_factory(tree, "plugin-watcher", extra=["--nfd-features-file", str(features_file)])
    wait_until("the plugin's feature file", lambda: file_labels(features_file) == labels)
    wait_labels(cluster, labels)

    for name in tree.names():
        if name.startswith("hisi_hpre-"):
            tree.remove(name)
    without_hpre = tree_labels(tree)
    cause = nfd.LABEL_PREFIX + "kae-hpre.likely-absent-cause"
    assert {k for k in without_hpre if "kae-hpre." in k} == {cause}, without_hpre
    assert without_hpre[cause] == "no-uacce"
    wait_until("the feature file without hpre", lambda: file_labels(features_file) == without_hpre)
    wait_labels(cluster, without_hpre)

    features_file.unlink()
    wait_labels(cluster, {})


def helm() -> str:
    """The Helm binary (scripts/install-helm.sh puts one under .tools/bin)."""
    found = shutil.which("helm") or str(REPO / ".tools" / "bin" / "helm")
    if not os.access(found, os.X_OK):
        if os.environ.get("CI") == "true" or os.environ.get("KAE_REQUIRE_E2E") == "1":
            pytest.fail("helm missing: run scripts/install-helm.sh", pytrace=False)
        pytest.skip("helm missing: run scripts/install-helm.sh")
    return found


def test_chart_nodefeaturerule_is_accepted_by_the_api_server(cluster: Cluster) -> None:
    """With NFD's CRDs served, the chart's `nfd.nodefeaturerules=auto` renders its
    NodeFeatureRule, and the API server stores it whole (its schema prunes no field)."""
    served = cluster.kubectl("api-versions").split()
    assert "nfd.k8s-sigs.io/v1alpha1" in served, served
    rendered = subprocess.run(
        [
            helm(),
            "template",
            "kae",
            str(CHART),
            "--api-versions",
            "nfd.k8s-sigs.io/v1alpha1",
            "--show-only",
            "templates/nodefeaturerule.yaml",
            "--namespace",
            "kae-system",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    created = json.loads(cluster.kubectl("create", "-f", "-", "-o", "json", stdin=rendered))
    name = created["metadata"]["name"]
    try:
        stored = cluster.get("nodefeaturerules.nfd.k8s-sigs.io", name)
        rules = stored["spec"]["rules"]
        assert {r["name"] for r in rules} == {
            "openfuyao.com/kae.hpre",
            "openfuyao.com/kae.sec",
            "openfuyao.com/kae.zip",
            "openfuyao.com/kae.present",
        }, rules
        for rule in rules:
            (match,) = rule["matchFeatures"]
            assert match["feature"] == "pci.device", rule
            assert set(match["matchExpressions"]) == {"vendor", "device"}, rule
            assert rule["labels"] == {rule["name"]: "true"}, rule
    finally:
        cluster.kubectl("delete", "nodefeaturerules.nfd.k8s-sigs.io", name, "--wait=false")
