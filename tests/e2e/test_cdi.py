"""CDI mode on containerd 2: the kubelet passes the plugin's cdi_devices to the runtime, which
resolves them from the plugin's spec file and gives the container the devices. On containerd 1.7
with enable_cdi = false, which would drop them, the plugin reads the runtime's config and names
the device nodes instead."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.cluster import Cluster, FixtureTree, Plugin, wait_until
from tests.e2e.pods import (
    allocated_names,
    assert_sees_only_its_devices,
    run_reporting,
)

TREE = "kunpeng920-2p"


def _crictl(cluster: Cluster, *args: str) -> str:
    sock = cluster.kubelet_root.parent / "containerd" / "containerd.sock"
    return subprocess.run(
        [str(cluster.bin / "crictl"), "--runtime-endpoint", f"unix://{sock}", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout


def _container_info(cluster: Cluster, pod: str) -> dict[str, Any]:
    ids = _crictl(cluster, "ps", "-q", "--label", f"io.kubernetes.pod.name={pod}").split()
    assert len(ids) == 1, ids
    info: dict[str, Any] = json.loads(_crictl(cluster, "inspect", ids[0]))
    return info


@pytest.mark.needs("cdi")
@pytest.mark.timeout(300)
def test_cdi_mode_gives_the_pod_its_devices_through_cdi_devices(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
) -> None:
    """With --cdi on and its spec in the directory containerd reads, a pod with
    {kae.hpre: 1, kae.sec: 1} runs; the CRI container config carries the
    openfuyao.com/kae=<pci address> CDI names and no raw device specs, and the runtime's OCI
    spec has the two device nodes the CDI spec names (served from a fixture tree whose device
    nodes are mknod'ed under its dev root)."""
    tree = tree_factory(TREE)
    cdi_dir = cluster.kubelet_root.parent / "cdi"
    plugin_factory(tree, "kubelet-socket", ["--cdi", "on", "--cdi-dir", str(cdi_dir)])
    cluster.wait_resources(capacity=tree.counts(), allocatable=tree.counts())
    spec_file = cdi_dir / "openfuyao.com-kae.json"
    wait_until("CDI spec written", spec_file.exists)
    try:
        report = run_reporting(cluster, "kae-cdi", {"hpre": 1, "sec": 1})
        names = allocated_names(report)
        assert report.dev == names and len(names) == 2, report
        info = _container_info(cluster, "kae-cdi")
        config = info["info"]["config"]
        cdi = sorted(d["name"] for d in config.get("CDI_devices", config.get("cdi_devices", [])))
        assert cdi == sorted(f"openfuyao.com/kae={tree.pci_address(n)}" for n in names), config
        assert not config.get("devices"), config
        oci_devices = {d["path"] for d in info["info"]["runtimeSpec"]["linux"]["devices"]}
        assert {f"/dev/{n}" for n in names} <= oci_devices, oci_devices
    finally:
        cluster.delete_pod("kae-cdi")


@pytest.mark.needs("cdi")
@pytest.mark.timeout(300)
def test_cdi_mode_on_a_fixture_tree_with_the_sysfs_view(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
) -> None:
    """CDI mode serving a fixture tree (dev and sysfs roots in a temp dir, the view on): the CDI
    spec's device nodes and PCI-function mounts name paths under the plugin's roots, so the pod
    runs and reads only its own devices' attributes (device/numa_node included) through
    /sys/class/uacce; every other entry dangles."""
    tree = tree_factory(TREE)
    cdi_dir = cluster.kubelet_root.parent / "cdi"
    plugin_factory(tree, "kubelet-socket", ["--cdi", "on", "--cdi-dir", str(cdi_dir)])
    cluster.wait_resources(capacity=tree.counts(), allocatable=tree.counts())
    try:
        report = run_reporting(cluster, "kae-cdi-view", {"hpre": 1, "sec": 1})
        assert_sees_only_its_devices(report, tree)
    finally:
        cluster.delete_pod("kae-cdi-view")


@pytest.mark.needs("cdi-off")
@pytest.mark.timeout(300)
def test_cdi_mode_over_a_runtime_with_cdi_off_names_the_device_nodes(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
) -> None:
    """--cdi on, on containerd 1.7 with enable_cdi = false: CDI names would reach a runtime
    that drops them, so Allocate names the device nodes (the CRI config carries raw device
    specs, no CDI names); the pod runs with exactly its devices, and the log says why, once."""
    tree = tree_factory(TREE)
    cdi_dir = cluster.kubelet_root.parent / "cdi"
    args = [
        "--cdi",
        "on",
        "--cdi-dir",
        str(cdi_dir),
        "--runtime-config",
        str(cluster.runtime_config),
    ]
    plugin = plugin_factory(tree, "kubelet-socket", args)
    cluster.wait_resources(capacity=tree.counts(), allocatable=tree.counts())
    try:
        report = run_reporting(cluster, "kae-cdi-off", {"hpre": 1, "sec": 1})
        names = allocated_names(report)
        assert report.dev == names and len(names) == 2, report
        config = _container_info(cluster, "kae-cdi-off")["info"]["config"]
        assert not config.get("CDI_devices", config.get("cdi_devices")), config
        assert {d["container_path"] for d in config["devices"]} == {f"/dev/{n}" for n in names}
    finally:
        cluster.delete_pod("kae-cdi-off")
    assert plugin.log_text().count("cdi is on but containerd does not apply CDI devices") == 1
