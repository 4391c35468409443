"""DRA mode on the real cluster, the daemon as a host process: its ResourceSlice describes the
fixture tree, and a pod whose ResourceClaimTemplate asks for an HPRE that does RSA and a SEC on
the same NUMA node runs with exactly those two devices, prepared through one CDI spec per claim,
which goes again when the pod is deleted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import REPO, Cluster, FixtureTree, Plugin, make_plugin, wait_until
from tests.e2e.pods import assert_sees_only_its_devices, manifest, read_report, wait_running

DRIVER = "kae.openfuyao.com"
CLASSES = REPO / "deploy" / "dra" / "deviceclasses.yaml"


def slices(cluster: Cluster) -> list[dict[str, Any]]:
    found = cluster.get("resourceslices", f"--field-selector=spec.driver={DRIVER}")
    items: list[dict[str, Any]] = found["items"]
    return items


def claim_template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "rsa",
                            "exactly": {
                                "deviceClassName": "hpre.kae.openfuyao.com",
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": f'device.attributes["{DRIVER}"].alg_rsa'
                                        }
                                    }
                                ],
                            },
                        },
                        {"name": "cipher", "exactly": {"deviceClassName": "sec.kae.openfuyao.com"}},
                    ],
                    "constraints": [{"matchAttribute": "resource.kubernetes.io/numaNode"}],
                }
            }
        },
    }


def claim_pod(cluster: Cluster, name: str, template: str) -> dict[str, Any]:
    pod = manifest(cluster, name, {})
    container = pod["spec"]["containers"][0]
    container["resources"] = {"claims": [{"name": "kae"}]}
    pod["spec"]["resourceClaims"] = [{"name": "kae", "resourceClaimTemplateName": template}]
    return pod


@pytest.fixture
def dra_plugin(
    cluster: Cluster, tree_factory: Callable[[str], FixtureTree], tmp_path: Path
) -> Iterator[tuple[Plugin, FixtureTree, Path]]:
    tree = tree_factory("kunpeng920-2p")
    cdi_dir = cluster.kubelet_root.parent / "cdi"
    extra = ["--mode", "dra", "--node-name", cluster.node, "--kubeconfig", cluster.kubeconfig,
             "--cdi-dir", str(cdi_dir)]  # fmt: skip
    plugin = make_plugin(cluster, tree, tmp_path, "plugin-watcher", extra=extra)
    cluster.kubectl("apply", "-f", str(CLASSES))
    plugin.start()
    try:
        plugin.wait_ready()
        yield plugin, tree, cdi_dir
    finally:
        plugin.stop()
        cluster.kubectl(
            "delete", "resourceslices", f"--field-selector=spec.driver={DRIVER}", check=False
        )
        cluster.kubectl("delete", "-f", str(CLASSES), "--ignore-not-found", check=False)


@pytest.mark.timeout(300)
def test_a_claim_by_capability_and_numa_gets_exactly_its_devices(
    cluster: Cluster, dra_plugin: tuple[Plugin, FixtureTree, Path]
) -> None:
    """Slices describe the tree; the claim's pod sees its two devices on one NUMA node through
    the sysfs view and their KAE_* variables; deleting the pod removes the claim's CDI spec."""
    _plugin, tree, cdi_dir = dra_plugin
    [published] = wait_until("the node's slice", lambda: slices(cluster) or None)
    devices = published["spec"]["devices"]
    assert len(devices) == len(tree.names()) == 6
    assert published["spec"]["pool"]["name"] == cluster.node
    cluster.apply(claim_template("kae-rsa-cipher"))
    try:
        cluster.apply(claim_pod(cluster, "kae-dra", "kae-rsa-cipher"))
        wait_running(cluster, "kae-dra", timeout=120)
        report = read_report(cluster, "kae-dra")
        names = assert_sees_only_its_devices(report, tree)
        assert {n.split("-")[0] for n in names} == {"hisi_hpre", "hisi_sec2"}, report
        assert len(set(report.readable.values())) == 1, report  # one NUMA node
        assert {"KAE_HPRE_PCI_ADDRESSES", "KAE_SEC_PCI_ADDRESSES"} <= set(report.env), report
        specs = wait_until(
            "a claim's CDI spec", lambda: list(cdi_dir.glob("openfuyao.com-kae_*.json")) or None
        )
        cluster.delete_pod("kae-dra")
        wait_until(
            "the claim's CDI spec removed", lambda: not any(p.exists() for p in specs), timeout=90
        )
    finally:
        cluster.delete_pod("kae-dra")
        cluster.kubectl(
            "delete", "resourceclaimtemplate", "kae-rsa-cipher", "--ignore-not-found", check=False
        )
