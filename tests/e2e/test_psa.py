"""`psa.enabled` on a cluster whose Pod Security admission enforces `baseline` by default: the one
command of the README (`helm install kae <chart> --set psa.enabled=true`, the release in
`default`) ends with the plugin Running in the namespace the chart created with its labels.

Needs the cluster flavour `KAE_E2E_PSA=baseline scripts/cluster/up` (an AdmissionConfiguration
whose PodSecurity defaults enforce baseline everywhere but kube-system); in the default flavour
these tests skip, whatever KAE_REQUIRE_E2E says. Run them alone in that flavour: the other e2e
modules start hostPath and host-network pods in namespaces that baseline refuses.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import Cluster, FixtureTree, wait_until
from tests.e2e.helm import CHART, Release, chart_values
from tests.e2e.test_helm import helm_binary, plugin_image

__all__ = ["helm_binary", "plugin_image"]  # module fixtures shared with test_helm.py

TREE = "kunpeng920-2p"
RELEASE = "kae-psa"
RELEASE_NAMESPACE = "default"
PLUGIN_NAMESPACE = "kae-psa-plugin"
PROBE_NAMESPACE = "kae-psa-probe"

pytestmark = pytest.mark.skipif(
    os.environ.get("KAE_E2E_PSA") != "baseline",
    reason="needs the cluster flavour KAE_E2E_PSA=baseline scripts/cluster/up",
)


def _plugin_pod(helm: str, values: Path) -> dict[str, Any]:
    """The chart's own plugin pod spec, as a bare Pod (for a server-side dry run)."""
    rendered = subprocess.run(
        [helm, "template", RELEASE, str(CHART), "--values", str(values)],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    (daemonset,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "DaemonSet"]
    spec = dict(daemonset["spec"]["template"]["spec"])
    # The chart's account lives in the plugin's namespace: in the probe's, admission would
    # refuse the pod for the missing account before Pod Security looks at it.
    spec.pop("serviceAccountName", None)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kae-psa-probe", "namespace": PROBE_NAMESPACE},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def installed(
    cluster: Cluster, helm_binary: str, plugin_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Release, FixtureTree, Path]]:
    """The chart installed with psa.enabled, its release in `default`; everything removed after
    (the namespace the chart keeps on uninstall included)."""
    base = tmp_path_factory.mktemp("psa")
    tree = FixtureTree.copy(TREE, base)
    values = base / "values.json"
    values.write_text(json.dumps(chart_values(cluster, tree, plugin_image, base / "host")))
    record = Release(helm_binary, cluster, RELEASE, RELEASE_NAMESPACE)
    try:
        record.run(
            "install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE,
            "--values", str(values), "--set", "psa.enabled=true",
            "--set", f"psa.namespace={PLUGIN_NAMESPACE}",
        )  # fmt: skip
        yield record, tree, values
    finally:
        record.uninstall()
        for namespace in (PLUGIN_NAMESPACE, PROBE_NAMESPACE):
            cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true")
        cluster.wait_resources(allocatable={"hpre": 0, "sec": 0, "zip": 0})


@pytest.mark.timeout(300)
def test_the_cluster_refuses_the_plugin_pod_in_a_namespace_without_labels(
    cluster: Cluster, helm_binary: str, installed: tuple[Release, FixtureTree, Path]
) -> None:
    """The precondition, so the install below proves something: in a fresh namespace the
    plugin's own pod spec is refused for its hostPath volumes (baseline is enforced)."""
    cluster.kubectl("create", "namespace", PROBE_NAMESPACE)
    pod = _plugin_pod(helm_binary, installed[2])
    out = subprocess.run(
        [str(cluster.bin / "kubectl"), "--kubeconfig", cluster.kubeconfig, "apply",
         "--dry-run=server", "-f", "-"],
        input=json.dumps(pod), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode != 0, "baseline is not enforced: the flavour did not start"
    assert 'violates PodSecurity "baseline' in out.stderr and "hostPath" in out.stderr


@pytest.mark.timeout(600)
def test_one_command_installs_and_the_plugin_runs_in_the_labelled_namespace(
    cluster: Cluster, installed: tuple[Release, FixtureTree, Path]
) -> None:
    """The release is `deployed` in `default`; the chart's namespace enforces `privileged`; the
    plugin pod there becomes Ready and the node advertises the fixture tree's devices."""
    record, tree, _values = installed
    status = json.loads(
        record.run("status", RELEASE, "--namespace", RELEASE_NAMESPACE, "-o", "json")
    )
    assert status["info"]["status"] == "deployed"
    labels = cluster.get("namespace", PLUGIN_NAMESPACE)["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "privileged"
    plugin = Release(record.helm, cluster, RELEASE, PLUGIN_NAMESPACE)
    pod = wait_until("plugin pod Ready", plugin.ready_pod, timeout=180)
    assert pod["metadata"]["namespace"] == PLUGIN_NAMESPACE
    counts = tree.counts()
    cluster.wait_resources(capacity=counts, allocatable=counts, timeout=120)
