"""Pods on the real containerd: the Allocate answers of the plugin applied by a real runtime, the
scheduler counting the devices, and pod-resources, /allocations and the API agreeing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.cluster import PREFIX, Cluster, FixtureTree, Plugin, wait_until
from tests.e2e.pods import (
    allocated_names,
    assert_sees_only_its_devices,
    manifest,
    pod_resources,
    read_report,
    run_reporting,
    wait_running,
)

TREE = "kunpeng920-2p"


def _plugin_exe(plugin: Plugin) -> str:
    return plugin.args[0]


def _allocations(plugin: Plugin) -> list[dict[str, Any]]:
    data: dict[str, Any] = json.loads(plugin.get("/allocations"))
    rows: list[dict[str, Any]] = data["allocations"]
    return rows


def _kae_rows(rows: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (r["resource"], r["device_id"], r["pod"]) for r in rows if r["resource"].startswith(PREFIX)
    }


def _scheduled_reason(cluster: Cluster, name: str) -> str | None:
    """The PodScheduled=False message once the scheduler has said why."""
    for cond in cluster.get("pod", name).get("status", {}).get("conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            message: str | None = cond.get("message")
            return message
    return None


@pytest.mark.parametrize("mode", ["kubelet-socket", "plugin-watcher"])
@pytest.mark.timeout(300)
def test_pod_gets_its_devices_and_env_and_frees_them(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
    mode: str,
) -> None:
    """A pod with limits {kae.hpre: 1, kae.sec: 1} runs on containerd with exactly its two /dev
    nodes and the KAE_* variables naming them; a pod asking for more hpre than is free stays
    Pending with the scheduler's 'Insufficient openfuyao.com/kae.hpre'; pod-resources (through
    `list --allocations`), the daemon's /allocations and the API agree; once it is deleted the
    pending pod gets both hpre devices, and after that one is deleted nothing is held.

    The plugin serves a fixture tree (sysfs and dev roots in a temp dir, device nodes mknod'ed
    there) with its defaults, the sysfs view on."""
    tree = tree_factory(TREE)
    plugin = plugin_factory(tree, mode)
    cluster.wait_resources(capacity=tree.counts(), allocatable=tree.counts())
    try:
        report = run_reporting(cluster, "kae-a", {"hpre": 1, "sec": 1})
        names = allocated_names(report)
        assert len([n for n in names if n.startswith("hisi_hpre")]) == 1, report
        assert len([n for n in names if n.startswith("hisi_sec2")]) == 1, report
        assert report.dev == names, report
        assert {"KAE_HPRE_PCI_ADDRESSES", "KAE_SEC_PCI_ADDRESSES"} <= set(report.env), report
        addresses = {tree.pci_address(n) for n in names}
        got = set(report.env["KAE_HPRE_PCI_ADDRESSES"].split(",")) | set(
            report.env["KAE_SEC_PCI_ADDRESSES"].split(",")
        )
        assert got == addresses, report

        # pod-resources, /allocations and the API agree.
        from_kubelet = _kae_rows(pod_resources(cluster, _plugin_exe(plugin)))
        assert {r[1] for r in from_kubelet} == addresses, from_kubelet
        assert all(r[2] == "kae-a" for r in from_kubelet), from_kubelet
        wait_until(
            "/allocations agrees with pod-resources",
            lambda: _kae_rows(_allocations(plugin)) == from_kubelet,
            timeout=30,
        )
        limits = cluster.get("pod", "kae-a")["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {PREFIX + "hpre": "1", PREFIX + "sec": "1"}

        # One hpre is held: a pod asking for two stays Pending with the scheduler's reason.
        cluster.apply(manifest(cluster, "kae-b", {"hpre": 2}))
        reason = wait_until(
            "kae-b unschedulable", lambda: _scheduled_reason(cluster, "kae-b"), timeout=60
        )
        assert f"Insufficient {PREFIX}hpre" in reason, reason
        assert cluster.get("pod", "kae-b")["status"]["phase"] == "Pending"

        # Deleting kae-a frees its hpre: the pending pod then gets both hpre devices, and
        # pod-resources and /allocations name only kae-b.
        cluster.delete_pod("kae-a")
        wait_running(cluster, "kae-b", timeout=120)
        report_b = read_report(cluster, "kae-b")
        assert report_b.dev == {"hisi_hpre-2", "hisi_hpre-3"}, report_b
        hpre_all = {tree.pci_address("hisi_hpre-2"), tree.pci_address("hisi_hpre-3")}
        want_b = {(PREFIX + "hpre", a, "kae-b") for a in hpre_all}
        wait_until(
            "pod-resources names only kae-b",
            lambda: _kae_rows(pod_resources(cluster, _plugin_exe(plugin))) == want_b,
            timeout=60,
        )
        wait_until(
            "/allocations names only kae-b",
            lambda: _kae_rows(_allocations(plugin)) == want_b,
            timeout=30,
        )
        cluster.delete_pod("kae-b")
        wait_until(
            "pod-resources empty",
            lambda: not _kae_rows(pod_resources(cluster, _plugin_exe(plugin))),
            timeout=60,
        )
        wait_until("/allocations empty", lambda: not _kae_rows(_allocations(plugin)), timeout=30)
    finally:
        cluster.delete_pod("kae-a")
        cluster.delete_pod("kae-b")


@pytest.mark.timeout(300)
def test_pod_on_a_fixture_tree_sees_only_its_devices_through_the_sysfs_view(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
) -> None:
    """The plugin serving a fixture tree (its sysfs and dev roots in a temp dir): the pod with
    {kae.hpre: 1, kae.sec: 1} runs, sees exactly its /dev nodes, and in /sys/class/uacce (the
    view, mounted over the test-only overlay) can read only its own devices' attributes,
    including device/numa_node; every other entry dangles."""
    tree = tree_factory(TREE)
    plugin_factory(tree, "kubelet-socket")
    cluster.wait_resources(capacity=tree.counts(), allocatable=tree.counts())
    try:
        report = run_reporting(cluster, "kae-view", {"hpre": 1, "sec": 1})
        assert_sees_only_its_devices(report, tree)
    finally:
        cluster.delete_pod("kae-view")
