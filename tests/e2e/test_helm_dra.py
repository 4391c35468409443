"""The chart in DRA mode on the real cluster (`helm install --set dra.enabled=true`): the driver
pod becomes Ready with its service-account token and RBAC, publishes the node's pool, serves a
claim and a plain `openfuyao.com/kae.zip: 1` limit (the DeviceClass's extendedResourceName),
may touch only its own node's slices (the ValidatingAdmissionPolicy), and `helm uninstall`
leaves no slices, sockets, CDI specs, DeviceClasses or RBAC objects.

Here the driver pod uses the host network and is told the API server's loopback address with
`extraEnv` (the chart's way for clusters whose pods cannot reach the `kubernetes` Service). On
the host network the chart rolls without a surge (a surge pod would wait Pending on the metrics
port); test_dra_rollout.py installs on the pod network, which reaches the API server at the
Service's address (scripts/cluster/up), and shows the surge rollout."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.e2e.cluster import REPO, Cluster, FixtureTree, wait_until
from tests.e2e.dra import (
    DRIVER,
    SLEEP,
    allocated,
    assert_release_left_nothing,
    cdi_specs,
    claim_pod,
    delete_template,
    dra_name,
    pod_claim,
    request,
    slice_devices,
    template,
)
from tests.e2e.helm import Release, chart_values
from tests.e2e.pods import manifest, read_report, wait_running
from tests.e2e.test_helm import helm_binary, plugin_image

pytestmark = pytest.mark.needs("dra", "cdi")

__all__ = ["helm_binary", "plugin_image"]  # module fixtures shared with test_helm.py

TREE = "kunpeng920-2p"
NAMESPACE = "kae-dra"
RELEASE = "kae-dra"
ENGINES = ("hpre", "sec", "zip")


def api_address(cluster: Cluster) -> tuple[str, str]:
    """Host and port of the API server, from the cluster's kubeconfig."""
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    url = urlsplit(config["clusters"][0]["cluster"]["server"])
    return str(url.hostname), str(url.port or 443)


def _chart_dra_settings() -> set[str]:
    """The settings the chart's schema allows under config.dra."""
    schema = json.loads(
        (REPO / "deploy" / "helm" / "kae-device-plugin" / "values.schema.json").read_text()
    )
    dra: dict[str, Any] = schema["properties"]["config"]["properties"]["dra"]
    return set(dra.get("properties", {}))


def dra_values(cluster: Cluster, tree: FixtureTree, image: str, base: Path) -> dict[str, Any]:
    """The e2e chart values plus DRA mode, the runtime's CDI dir and the loopback API server."""
    values = chart_values(cluster, tree, image, base / "host")
    host, port = api_address(cluster)
    values["dra"] = {"enabled": True}
    if "runtimeConfig" in _chart_dra_settings():
        # The cluster's containerd config, which the chart mounts read-only for the driver to
        # tell whether CDI is on (containerd 1.7); a chart without the setting reads the default
        # path, absent here, and its driver refuses on containerd 1.7 even with CDI on.
        values.setdefault("config", {})["dra"] = {"runtimeConfig": str(cluster.runtime_config)}
    values["cdi"] = {"specDir": str(cluster.kubelet_root.parent / "cdi")}
    values["hostNetwork"] = True
    values["extraEnv"] = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": host},
        {"name": "KUBERNETES_SERVICE_PORT", "value": port},
    ]
    return values


@pytest.fixture(scope="module")
def release(
    cluster: Cluster, helm_binary: str, plugin_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Release, FixtureTree]]:
    """The chart installed in DRA mode; uninstalled (and its namespace deleted) at the end."""
    base = tmp_path_factory.mktemp("helm-dra")
    tree = FixtureTree.copy(TREE, base)
    path = base / "values.json"
    path.write_text(json.dumps(dra_values(cluster, tree, plugin_image, base)))
    installed = Release(helm_binary, cluster, RELEASE, NAMESPACE)
    installed.install(path)
    try:
        yield installed, tree
    finally:
        for pod in ("kae-dra-claim", "kae-dra-limit"):
            cluster.delete_pod(pod)
        delete_template(cluster, "kae-dra-zip")
        installed.uninstall()
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true")


def driver_ready(chart: Release) -> dict[str, Any] | None:
    """The driver pod once Ready; fails at once, with its words, when the driver refuses for
    a runtime that applies no CDI device (it is never Ready then)."""
    pod = chart.ready_pod()
    if pod is None and "does not apply CDI devices" in (logs := chart.logs()):
        refusal = next(line for line in logs.splitlines() if "does not apply CDI devices" in line)
        raise AssertionError(f"the driver pod refuses: {refusal.strip()}")
    return pod


def ours(cluster: Cluster, kind: str) -> list[str]:
    """Names of the cluster-scoped objects of `kind` the release made."""
    found = cluster.get(kind, "-l", f"app.kubernetes.io/instance={RELEASE}")
    return [item["metadata"]["name"] for item in found["items"]]


@pytest.mark.timeout(600)
def test_install_publishes_the_pool_with_rbac_and_device_classes(
    cluster: Cluster, release: tuple[Release, FixtureTree]
) -> None:
    """The driver pod becomes Ready (registered, slices published); the slices list the tree's
    devices; the three DeviceClasses and the driver's ClusterRole exist."""
    chart, tree = release
    wait_until("driver pod Ready", lambda: driver_ready(chart), timeout=240)
    wait_until("the pool", lambda: len(slice_devices(cluster)) == len(tree.names()), timeout=60)
    classes = {c["metadata"]["name"] for c in cluster.get("deviceclasses")["items"]}
    assert {f"{e}.{DRIVER}" for e in ENGINES} <= classes
    assert ours(cluster, "clusterroles") and ours(cluster, "clusterrolebindings")


@pytest.mark.needs("dra-extended-resource")
@pytest.mark.timeout(600)
def test_a_claim_and_a_plain_limit_are_both_served_by_dra(
    cluster: Cluster, release: tuple[Release, FixtureTree]
) -> None:
    """A claim for one ZIP runs with it; a pod asking `openfuyao.com/kae.zip: 1` and no claim
    runs too, the scheduler making its claim through the DeviceClass's extendedResourceName,
    and sees its device with the same variables as under the device plugin."""
    chart, tree = release
    wait_until("driver pod Ready", lambda: driver_ready(chart), timeout=240)
    cluster.apply(template("kae-dra-zip", [request("zip", "zip")]))
    cluster.apply(claim_pod(cluster, "kae-dra-claim", "kae-dra-zip", script=SLEEP))
    wait_running(cluster, "kae-dra-claim", timeout=120)
    [held] = allocated(pod_claim(cluster, "kae-dra-claim"))
    cluster.apply(manifest(cluster, "kae-dra-limit", {"zip": 1}))
    wait_running(cluster, "kae-dra-limit", timeout=120)
    status = cluster.get("pod", "kae-dra-limit")["status"]
    assert status.get("extendedResourceClaimStatus"), status
    report = read_report(cluster, "kae-dra-limit")
    [name] = [n for n in report.dev if n.startswith("hisi_zip")]
    assert report.readable.keys() == {name}, report
    assert report.env["KAE_ZIP_DEVICES"] == name, report
    assert dra_name(tree, name) != held  # two claims, two devices


def _kubeconfig_as_driver(cluster: Cluster, claimed_node: str) -> str:
    """A kubeconfig of the admin impersonating the driver's service account on `claimed_node`
    (its user's ``as`` and ``as-user-extra``, which every kubectl reads; the
    ``--as-user-extra`` flag is newer than kubectl 1.34)."""
    config: dict[str, Any] = json.loads(cluster.kubectl("config", "view", "--raw", "-o", "json"))
    for entry in config["users"]:
        entry["user"]["as"] = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-kae-device-plugin"
        entry["user"]["as-user-extra"] = {"authentication.kubernetes.io/node-name": [claimed_node]}
    path = Path(cluster.kubeconfig).with_name(f"kae-vap-probe-{claimed_node}.kubeconfig")
    path.write_text(json.dumps(config))
    return str(path)


def _create_slice_as_driver(cluster: Cluster, node: str, claimed_node: str) -> str:
    """A server-side dry-run create of a slice for `node`, as the driver's service account on
    `claimed_node`; the API server's stderr ('' when allowed)."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"kae-vap-probe-{node}"},
        "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                 "resourceSliceCount": 1}, "devices": []},
    }  # fmt: skip
    done = subprocess.run(
        [str(cluster.bin / "kubectl"), "--kubeconfig", _kubeconfig_as_driver(cluster, claimed_node),
         "create", "--dry-run=server", "-f", "-"],
        input=json.dumps(body), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return "" if done.returncode == 0 else done.stderr


@pytest.mark.timeout(300)
def test_the_driver_may_touch_only_its_own_nodes_slices(
    cluster: Cluster, release: tuple[Release, FixtureTree]
) -> None:
    """As the driver's service account on this node: a slice for this node is allowed, one for
    another node is refused by the chart's ValidatingAdmissionPolicy."""
    wait_until("the policy bound", lambda: ours(cluster, "validatingadmissionpolicybindings"))
    assert _create_slice_as_driver(cluster, cluster.node, cluster.node) == ""
    refused = wait_until(
        "the other node's slice refused",
        lambda: _create_slice_as_driver(cluster, "another-node", cluster.node) or None,
    )
    assert "ValidatingAdmissionPolicy" in refused or "denied" in refused, refused


@pytest.mark.timeout(600)
def test_uninstall_leaves_no_slices_sockets_specs_or_objects(
    cluster: Cluster, release: tuple[Release, FixtureTree]
) -> None:
    """After the workloads go and `helm uninstall`: no slice of the driver (the kubelet removes
    them once the driver is gone), no registration or service socket, no claim CDI spec or
    checkpoint record, and no DeviceClass, ClusterRole or policy of the release."""
    chart, _tree = release
    for pod in ("kae-dra-claim", "kae-dra-limit"):
        cluster.delete_pod(pod)
    cdi_dir = cluster.kubelet_root.parent / "cdi"
    wait_until("the claims unprepared", lambda: not cdi_specs(cdi_dir), timeout=90)
    chart.uninstall()
    assert_release_left_nothing(cluster, RELEASE)
