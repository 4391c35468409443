"""doctor's DRA fixes hold against the chart as rendered: the "one mode per node" fix moves only
the device-plugin pod off the node (its label, applied to the rendered DaemonSets' affinity), and
the RBAC fix lists exactly the chart ClusterRole's resources and verbs. Skipped without Helm 3."""

from __future__ import annotations

import re

from kae_deviceplugin.apiserver.hints import DRIVER_RULES, RBAC_FIX
from kae_deviceplugin.cli.doctor_dra import one_mode_fix
from tests.deploy.test_chart_dra import DRA, daemonsets, is_dra
from tests.deploy.test_deploy import LINUX, OPT_OUT_LABEL, PRESENT_LABEL, one, render, schedulable

NODE = "worker-1"


def labels_the_fix_sets(fix: str) -> dict[str, str]:
    """The node labels of the fix's `kubectl label node <node> k=v` commands."""
    found = re.findall(rf"kubectl label node {NODE} ([\w./-]+)=([\w.-]+)", fix)
    assert found, fix
    return dict(found)


def test_the_one_mode_fix_moves_only_the_device_plugin_pod() -> None:
    """On a release with a device-plugin default and the fix's DRA configuration, a node with
    the fix's label keeps a DRA pod and loses the device-plugin pod; the opt-out label, which the
    fix does not suggest, would have taken both."""
    fix = one_mode_fix(NODE)
    config = re.search(r"--set (configs\.[\w-]+\.mode=dra)", fix)
    assert config is not None, fix
    by_name = daemonsets(render(None, config.group(1)))
    node = {**LINUX, PRESENT_LABEL: "true"}
    on_node = {n: schedulable([d], node | labels_the_fix_sets(fix)) for n, d in by_name.items()}
    assert {n: is_dra(by_name[n]) for n, placed in on_node.items() if placed} == {
        "kae-kae-device-plugin-dra": True
    }
    assert f"{OPT_OUT_LABEL}=false" not in fix
    opted_out = node | {OPT_OUT_LABEL: "false"}
    assert not any(schedulable([d], opted_out) for d in by_name.values())


def test_the_rbac_fix_lists_exactly_the_charts_cluster_role() -> None:
    """Every (group, resource) of the rendered ClusterRole with the same verbs, nothing else,
    and the fix's text names each verb of each resource."""
    role = one(render(None, DRA), "ClusterRole")
    granted = {
        (group, resource): sorted(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert granted == {(g, r): sorted(verbs) for g, r, verbs in DRIVER_RULES}
    for group, resource, verbs in DRIVER_RULES:
        assert f"{resource} {', '.join(verbs)}" in RBAC_FIX
        assert (group or "the core group") in RBAC_FIX
