"""The plugin as a host process on a fixture tree, registered with the real kubelet in both modes:
the node object the API server shows follows the tree's devices and their health, and survives a
kubelet restart and a plugin restart."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.cluster import PREFIX, Cluster, FixtureTree, Plugin

MODES = ["kubelet-socket", "plugin-watcher"]
TREE = "kunpeng920-2p"


def _start(
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
    cluster: Cluster,
    mode: str,
) -> tuple[FixtureTree, Plugin]:
    tree = tree_factory(TREE)
    plugin = plugin_factory(tree, mode)
    cluster.wait_resources(capacity=tree.counts(), allocatable=tree.counts(healthy_only=True))
    return tree, plugin


def _assert_stream_live(cluster: Cluster, tree: FixtureTree, name: str = "hisi_hpre-2") -> None:
    """A health flip reaches the node and so does its recovery: the ListAndWatch stream the
    kubelet holds now is live (a stale node status cannot pass this)."""
    isolate = tree.attr(name, "isolate")
    isolate.write_text("1\n")
    cluster.wait_resources(capacity=tree.counts(), allocatable=tree.counts(healthy_only=True))
    isolate.write_text("0\n")
    cluster.wait_resources(capacity=tree.counts(), allocatable=tree.counts(healthy_only=True))


@pytest.mark.parametrize("mode", MODES)
def test_capacity_and_allocatable_equal_the_fixture(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
    mode: str,
) -> None:
    """Node capacity and allocatable of kae.{hpre,sec,zip} equal the fixture's devices (all
    healthy) as read through the API, and `kubectl describe node` shows kae.hpre."""
    tree, _ = _start(tree_factory, plugin_factory, cluster, mode)
    assert tree.counts() == {"hpre": 2, "sec": 2, "zip": 2}
    described = cluster.kubectl("describe", "node", cluster.node)
    lines = [line.split() for line in described.splitlines() if PREFIX + "hpre" in line]
    # Once under Capacity, once under Allocatable, once under Allocated resources.
    assert len(lines) >= 2, described
    assert ["openfuyao.com/kae.hpre:", "2"] in lines, described


@pytest.mark.parametrize("mode", MODES)
def test_health_flip_lowers_allocatable_and_recovery_restores_it(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
    mode: str,
) -> None:
    """isolate=1 on an hpre device and dev_state=-1 on a sec device each lower allocatable by
    one while capacity stays; writing the healthy values back restores allocatable."""
    tree, _ = _start(tree_factory, plugin_factory, cluster, mode)
    tree.attr("hisi_hpre-2", "isolate").write_text("1\n")
    tree.attr("hisi_sec2-0", "dev_state").write_text("-1\n")
    cluster.wait_resources(
        capacity={"hpre": 2, "sec": 2, "zip": 2}, allocatable={"hpre": 1, "sec": 1, "zip": 2}
    )
    tree.attr("hisi_hpre-2", "isolate").write_text("0\n")
    tree.attr("hisi_sec2-0", "dev_state").write_text("0\n")
    cluster.wait_resources(
        capacity={"hpre": 2, "sec": 2, "zip": 2}, allocatable={"hpre": 2, "sec": 2, "zip": 2}
    )


@pytest.mark.parametrize("mode", MODES)
def test_removing_a_device_lowers_capacity(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
    mode: str,
) -> None:
    """Deleting a device's class link takes it out of the node's capacity and allocatable."""
    tree, _ = _start(tree_factory, plugin_factory, cluster, mode)
    tree.remove("hisi_zip-5")
    cluster.wait_resources(
        capacity={"hpre": 2, "sec": 2, "zip": 1}, allocatable={"hpre": 2, "sec": 2, "zip": 1}
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.timeout(300)
def test_kubelet_restart_comes_back_without_help(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
    mode: str,
) -> None:
    """After the real kubelet restarts (new kubelet.sock, a new plugin watcher), the plugin is
    registered again on its own and its stream carries health changes to the node."""
    tree, plugin = _start(tree_factory, plugin_factory, cluster, mode)
    cluster.restart_kubelet()
    cluster.wait_resources(
        capacity=tree.counts(), allocatable=tree.counts(healthy_only=True), timeout=120
    )
    _assert_stream_live(cluster, tree)
    assert plugin.proc is not None and plugin.proc.poll() is None, plugin.log_text()


@pytest.mark.parametrize("mode", MODES)
def test_plugin_restart_comes_back_without_help(
    cluster: Cluster,
    tree_factory: Callable[[str], FixtureTree],
    plugin_factory: Callable[..., Plugin],
    mode: str,
) -> None:
    """A plugin stopped with SIGTERM and started again registers again; the node first loses the
    devices from allocatable, then gets them back, and the new stream is live."""
    tree, plugin = _start(tree_factory, plugin_factory, cluster, mode)
    plugin.stop()
    assert plugin.proc is not None and plugin.proc.returncode == 0, plugin.log_text()
    cluster.wait_resources(allocatable={"hpre": 0, "sec": 0, "zip": 0})
    plugin.start()
    plugin.wait_ready()
    cluster.wait_resources(capacity=tree.counts(), allocatable=tree.counts(healthy_only=True))
    _assert_stream_live(cluster, tree)
