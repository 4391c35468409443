"""The chart on the real cluster: `helm install` of deploy/helm/kae-device-plugin with the image
built from the Dockerfile (scripts/cluster/plugin-image) and imported into containerd, serving a
fixture tree through `devicePlugin.fixtureRoot`; then a workload, the opt-out label, `helm
upgrade` to a new image tag and `helm uninstall`.

One release serves the whole module and the tests run in file order, each leaving it installed
and Ready for the next; the last one uninstalls it. The workload pod is shared the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.test_deploy import _helm
from tests.e2e.cluster import (
    PREFIX,
    Cluster,
    FixtureTree,
    e2e_required,
    plugin_exe,
    wait_until,
)
from tests.e2e.helm import (
    OPT_OUT_LABEL,
    Ctr,
    Release,
    allocated_series,
    build_plugin_image,
    chart_values,
    pod_get,
    split_image,
)
from tests.e2e.pods import allocated_names, manifest, pod_resources, read_report, wait_running

TREE = "kunpeng920-2p"
NAMESPACE = "kae-e2e-helm"
WORKLOAD = "kae-helm-app"
UPGRADE_TAG = "e2e-upgrade"
# What the kubelet itself puts in every namespace; not the chart's.
NAMESPACE_DEFAULTS = {"configmap/kube-root-ca.crt", "serviceaccount/default"}


@dataclass
class Deployment:
    """The installed release and what it was installed with."""

    release: Release
    tree: FixtureTree
    host_dir: Path
    image: str
    ctr: Ctr


def _fail_or_skip(reason: str) -> None:
    if e2e_required():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def helm_binary() -> str:
    """Helm 3 ($HELM, .tools/bin/helm from scripts/install-helm.sh, or PATH)."""
    found = _helm()
    if found is None:
        _fail_or_skip("Helm 3 is not installed: run scripts/install-helm.sh")
    assert found is not None
    return found


@pytest.fixture(scope="module")
def plugin_image(cluster: Cluster) -> str:
    """The plugin image built from the Dockerfile, imported into the cluster's containerd."""
    try:
        archive = build_plugin_image()
    except subprocess.CalledProcessError as err:
        tail = "\n".join(str(err.stderr).strip().splitlines()[-5:])
        _fail_or_skip(f"scripts/cluster/plugin-image failed:\n{tail}")
    return Ctr(cluster).import_archive(archive)


@pytest.fixture(scope="module")
def deployment(
    cluster: Cluster,
    helm_binary: str,
    plugin_image: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    """The chart installed with the test values; uninstalled, its namespace, the node label and
    the retagged image removed at the end."""
    base = tmp_path_factory.mktemp("helm")
    tree = FixtureTree.copy(TREE, base)
    host_dir = base / "host"
    values = base / "values.json"
    values.write_text(json.dumps(chart_values(cluster, tree, plugin_image, host_dir)))
    release = Release(helm_binary, cluster, "kae", NAMESPACE)
    ctr = Ctr(cluster)
    release.install(values)
    try:
        yield Deployment(release, tree, host_dir, plugin_image, ctr)
    finally:
        release.uninstall()
        cluster.kubectl("label", "node", cluster.node, f"{OPT_OUT_LABEL}-", check=False)
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true")
        ctr.remove(f"{split_image(plugin_image)[0]}:{UPGRADE_TAG}")
        # The next module must not read this one's allocatable.
        cluster.wait_resources(allocatable={"hpre": 0, "sec": 0, "zip": 0})


@pytest.fixture(scope="module")
def workload(cluster: Cluster, deployment: Deployment) -> Iterator[str]:
    """A pod with {kae.hpre: 1, kae.sec: 1}, running once the plugin is Ready."""
    wait_until("plugin pod Ready", deployment.release.ready_pod, timeout=180)
    tree = deployment.tree
    cluster.wait_resources(capacity=tree.counts(), allocatable=tree.counts(), timeout=120)
    cluster.apply(manifest(cluster, WORKLOAD, {"hpre": 1, "sec": 1}))
    try:
        wait_running(cluster, WORKLOAD)
        yield WORKLOAD
    finally:
        cluster.delete_pod(WORKLOAD)


def _kae_rows(cluster: Cluster) -> set[tuple[str, str, str, str]]:
    """(resource, device ID, pod, container) of the KAE rows of the kubelet's pod-resources."""
    return {
        (r["resource"], r["device_id"], r["pod"], r["container"])
        for r in pod_resources(cluster, plugin_exe())
        if r["resource"].startswith(PREFIX)
    }


def _plugin_rows(pod: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """The same rows as the plugin pod's /allocations gives them."""
    data = json.loads(pod_get(pod, "/allocations"))
    return {
        (r["resource"], r["device_id"], r["pod"], r["container"])
        for r in data["allocations"]
        if r["resource"].startswith(PREFIX)
    }


def _container(cluster: Cluster, name: str) -> tuple[str, int]:
    """(container ID, restart count) of the pod's one container."""
    status = cluster.get("pod", name, "-n", "default")["status"]["containerStatuses"][0]
    return status["containerID"], int(status["restartCount"])


@pytest.mark.timeout(600)
def test_install_makes_the_plugin_pod_ready_and_gives_the_node_capacity(
    cluster: Cluster, deployment: Deployment
) -> None:
    """After `helm install` the DaemonSet's pod becomes Ready (its /readyz: every resource
    registered through the kubelet's plugin watcher and streaming), runs the image imported
    from the archive, and the node's capacity and allocatable of kae.{hpre,sec,zip} equal the
    fixture tree's devices."""
    pod = wait_until("plugin pod Ready", deployment.release.ready_pod, timeout=180)
    assert pod["spec"]["containers"][0]["image"] == deployment.image
    counts = deployment.tree.counts()
    assert counts == {"hpre": 2, "sec": 2, "zip": 2}
    cluster.wait_resources(capacity=counts, allocatable=counts, timeout=120)
    # auto registration picked the plugin watcher: the sockets are in plugins_registry.
    registry = cluster.kubelet_root / "plugins_registry"
    assert {p.name for p in registry.glob("kae-*.sock")} == {
        "kae-hpre.sock",
        "kae-sec.sock",
        "kae-zip.sock",
    }


@pytest.mark.timeout(300)
def test_metrics_of_the_plugin_pod_name_the_workload_pod(
    cluster: Cluster, deployment: Deployment, workload: str
) -> None:
    """A pod with {kae.hpre: 1, kae.sec: 1} runs with the two devices the chart's plugin gave
    it, and kae_device_allocated scraped from the plugin pod (at its pod IP) names that pod,
    namespace and container, once per device, with the devices the container was given."""
    report = read_report(cluster, workload)
    names = allocated_names(report)
    assert report.dev == names and len(names) == 2, report
    pod = wait_until("plugin pod Ready", deployment.release.ready_pod, timeout=60)

    def holders() -> list[dict[str, str]] | None:
        rows = [r for r in allocated_series(pod_get(pod, "/metrics")) if r["pod"] == workload]
        return rows if len(rows) == 2 else None

    rows = wait_until("kae_device_allocated names the workload", holders, timeout=60)
    assert {(r["namespace"], r["pod"], r["container"]) for r in rows} == {
        ("default", workload, "main")
    }
    assert {r["device"] for r in rows} == names
    assert {r["engine"] for r in rows} == {"hpre", "sec"}
    assert {r["pci_address"] for r in rows} == {deployment.tree.pci_address(n) for n in names}


@pytest.mark.timeout(300)
def test_opt_out_label_removes_the_plugin_pod_and_removing_it_brings_it_back(
    cluster: Cluster, deployment: Deployment, workload: str
) -> None:
    """Labelling the node openfuyao.com/kae.deploy.device-plugin=false (the chart's node-affinity
    opt-out) makes the DaemonSet remove its pod from the node, and the node's allocatable drops
    to 0 (capacity stays); removing the label brings a new pod that becomes Ready and registers
    again. The workload keeps running throughout."""
    release = deployment.release
    counts = deployment.tree.counts()
    before = wait_until("plugin pod Ready", release.ready_pod, timeout=60)
    cluster.kubectl("label", "node", cluster.node, f"{OPT_OUT_LABEL}=false", "--overwrite")
    try:
        wait_until(
            "plugin pod gone from the node", lambda: not release.pods(terminating=True), timeout=120
        )
        # The kubelet marks a departed plugin's devices unhealthy and keeps its capacity (for
        # its grace period), so allocatable drops and capacity stays.
        cluster.wait_resources(capacity=counts, allocatable={"hpre": 0, "sec": 0, "zip": 0})
    finally:
        cluster.kubectl("label", "node", cluster.node, f"{OPT_OUT_LABEL}-")
    after = wait_until("plugin pod back and Ready", release.ready_pod, timeout=180)
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    cluster.wait_resources(capacity=counts, allocatable=counts, timeout=120)
    assert _container(cluster, workload)[1] == 0


@pytest.mark.timeout(400)
def test_upgrade_to_a_new_image_tag_keeps_the_workload_and_its_devices(
    cluster: Cluster, deployment: Deployment, workload: str
) -> None:
    """`helm upgrade --set image.tag=<new>` (the same image under a second name in containerd)
    replaces the plugin pod with one running the new tag, which registers again; the workload
    stays Running in the same container with the same devices (pod-resources before and after,
    and the new plugin's /allocations, agree), and still reads its devices' attributes through
    the sysfs view the old plugin made."""
    release = deployment.release
    old = wait_until("plugin pod Ready", release.ready_pod, timeout=60)
    held = wait_until("pod-resources lists the workload", lambda: _kae_rows(cluster), timeout=30)
    assert {r[2] for r in held} == {workload} and len(held) == 2, held
    container = _container(cluster, workload)

    repository, _ = split_image(deployment.image)
    new_image = f"{repository}:{UPGRADE_TAG}"
    deployment.ctr.tag(deployment.image, new_image)
    release.upgrade(f"image.tag={UPGRADE_TAG}")

    def upgraded() -> dict[str, Any] | None:
        pod = release.ready_pod()
        if pod is None or pod["metadata"]["uid"] == old["metadata"]["uid"]:
            return None
        return pod if pod["spec"]["containers"][0]["image"] == new_image else None

    new = wait_until("new plugin pod Ready", upgraded, timeout=180)
    counts = deployment.tree.counts()
    cluster.wait_resources(capacity=counts, allocatable=counts, timeout=120)
    assert _container(cluster, workload) == container
    assert _kae_rows(cluster) == held
    wait_until("new plugin's /allocations agree", lambda: _plugin_rows(new) == held, timeout=30)
    for name in allocated_names(read_report(cluster, workload)):
        numa = cluster.kubectl(
            "exec", workload, "-n", "default", "--",
            "cat", f"/sys/class/uacce/{name}/device/numa_node",
        )  # fmt: skip
        want = (deployment.tree.attr(name, "device") / "numa_node").read_text()
        assert numa.strip() == want.strip(), name


@pytest.mark.timeout(400)
def test_uninstall_leaves_no_sockets_labels_files_or_objects(
    cluster: Cluster, deployment: Deployment, workload: str
) -> None:
    """With the workload deleted, `helm uninstall` leaves nothing of the plugin: no kae sockets
    in the kubelet's device-plugins dir or plugins_registry, no kae label on the node, nothing
    in the state dir (the view) or the NFD features dir the chart mounts, no CDI spec, and no
    object in the release namespace but what Kubernetes puts in every namespace."""
    cluster.delete_pod(workload)
    wait_until("pod-resources empty", lambda: not _kae_rows(cluster), timeout=60)
    state, features = deployment.host_dir / "state", deployment.host_dir / "features.d"
    assert (state / "uacce-class").is_dir() and (features / "kae").is_file()
    deployment.release.uninstall()
    wait_until(
        "plugin pods gone", lambda: not deployment.release.pods(terminating=True), timeout=120
    )
    assert not deployment.release.installed()

    for where in ("device-plugins", "plugins_registry"):
        left = sorted(p.name for p in (cluster.kubelet_root / where).iterdir())
        assert not [n for n in left if "kae" in n], (where, left)
    labels = cluster.get("node", cluster.node)["metadata"].get("labels", {})
    assert not [k for k in labels if "kae" in k], labels
    assert sorted(os.listdir(state)) == [] and sorted(os.listdir(features)) == []
    cdi_dir = cluster.kubelet_root.parent / "cdi"
    assert not list(cdi_dir.glob("openfuyao.com-kae*")), sorted(os.listdir(cdi_dir))

    kinds = "all,configmaps,secrets,serviceaccounts,networkpolicies,endpointslices,roles"

    def left_objects() -> list[str] | None:
        names = cluster.kubectl("get", kinds, "-n", NAMESPACE, "-o", "name").split()
        left = [n for n in names if n not in NAMESPACE_DEFAULTS]
        return None if left else left

    assert wait_until("namespace empty", left_objects, timeout=60) == []
