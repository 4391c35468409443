"""DRA mode on the real cluster, the daemon as a host process: its ResourceSlice describes the
fixture tree, and a pod whose ResourceClaimTemplate asks for an HPRE that does RSA and a SEC on
the same NUMA node runs with exactly those two devices, prepared through one CDI spec per claim,
which goes again when the pod is deleted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, FixtureTree, Plugin, wait_until
from tests.e2e.dra import (
    DRIVER,
    cdi_specs,
    claim_pod,
    delete_template,
    request,
    running_dra_plugin,
    slices,
    template,
)
from tests.e2e.pods import assert_sees_only_its_devices, read_report, wait_running

pytestmark = pytest.mark.needs("dra", "cdi")

RSA_AND_CIPHER = template(
    "kae-rsa-cipher",
    [
        request("rsa", "hpre", f'device.attributes["{DRIVER}"].alg_rsa'),
        request("cipher", "sec"),
    ],
    [{"matchAttribute": "resource.kubernetes.io/numaNode"}],
)


@pytest.fixture
def dra_plugin(
    cluster: Cluster, tree_factory: Callable[[str], FixtureTree], tmp_path: Path
) -> Iterator[tuple[Plugin, FixtureTree, Path]]:
    tree = tree_factory("kunpeng920-2p")
    with running_dra_plugin(cluster, tree, tmp_path) as (plugin, cdi_dir):
        yield plugin, tree, cdi_dir


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
    cluster.apply(RSA_AND_CIPHER)
    try:
        cluster.apply(claim_pod(cluster, "kae-dra", "kae-rsa-cipher"))
        wait_running(cluster, "kae-dra", timeout=120)
        report = read_report(cluster, "kae-dra")
        names = assert_sees_only_its_devices(report, tree)
        assert {n.split("-")[0] for n in names} == {"hisi_hpre", "hisi_sec2"}, report
        assert len(set(report.readable.values())) == 1, report  # one NUMA node
        assert {"KAE_HPRE_PCI_ADDRESSES", "KAE_SEC_PCI_ADDRESSES"} <= set(report.env), report
        specs = wait_until("a claim's CDI spec", lambda: cdi_specs(cdi_dir) or None)
        cluster.delete_pod("kae-dra")
        wait_until(
            "the claim's CDI spec removed", lambda: not any(p.exists() for p in specs), timeout=90
        )
    finally:
        cluster.delete_pod("kae-dra")
        delete_template(cluster, "kae-rsa-cipher")
