"""The pool anyone can read (issue 30), on the real cluster with the DRA daemon as a host
process: a prepared claim's status names its device with its facts and health, kept current
through an isolation and its recovery; `kubectl kae nodes` and `devices` agree with the API;
`kubectl kae why` explains the claims the scheduler refuses (an algorithm no device has, a NUMA
pair that cannot exist, a tainted device) in the scheduler's own terms."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import REPO, Cluster, FixtureTree, wait_until
from tests.e2e.dra import (
    DRIVER,
    SLEEP,
    allocated,
    cdi_specs,
    claim_pod,
    delete_template,
    dra_name,
    pod_claim,
    request,
    running_dra_plugin,
    slice_devices,
    template,
    uacce_of,
)
from tests.e2e.pods import wait_running

# What the stack must have (tests/e2e/stack.py): on one that lacks it the module skips, naming why.
pytestmark = pytest.mark.needs("dra", "cdi", "dra-taints")

TREE = "kunpeng920-2p"
PODS = ("kae-read-held", "kae-read-sm2", "kae-read-numa", "kae-read-tainted")
TEMPLATES = ("kae-read-hpre", "kae-read-sm2", "kae-read-numa", "kae-read-tainted")
ATTR = f'device.attributes["{DRIVER}"]'
PCI = 'device.attributes["resource.kubernetes.io"].pciBusID'


def kae(cluster: Cluster, *args: str) -> Any:
    """`kubectl kae ARGS -o json` as the plugin answers with the cluster's kubeconfig."""
    proc = subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin.kubectl", *args, "-o", "json",
         "--kubeconfig", cluster.kubeconfig],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def status_entry(claim: dict[str, Any], device: str) -> dict[str, Any] | None:
    for entry in claim.get("status", {}).get("devices", []):
        if entry.get("driver") == DRIVER and entry.get("device") == device:
            found: dict[str, Any] = entry
            return found
    return None


def condition(entry: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    return next((c for c in (entry or {}).get("conditions", []) if c["type"] == kind), {})


def health(cluster: Cluster, pod: str, device: str) -> str | None:
    """The Healthy condition's status in the pod's claim's status for ``device``."""
    found = condition(status_entry(pod_claim(cluster, pod), device), "Healthy")
    value: str | None = found.get("status")
    return value


def unschedulable(cluster: Cluster, pod: str) -> bool:
    conditions = cluster.get("pod", pod).get("status", {}).get("conditions", [])
    return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in conditions)  # fmt: skip


@pytest.fixture
def node(cluster: Cluster, tree_factory: Any, tmp_path: Path) -> Iterator[tuple[FixtureTree, Path]]:
    tree: FixtureTree = tree_factory(TREE)
    with running_dra_plugin(cluster, tree, tmp_path) as (_plugin, cdi_dir):
        wait_until("the pool", lambda: len(slice_devices(cluster)) == len(tree.names()))
        try:
            yield tree, cdi_dir
        finally:
            for pod in PODS:
                cluster.delete_pod(pod)
            for name in TEMPLATES:
                delete_template(cluster, name)
            wait_until("every claim unprepared", lambda: not cdi_specs(cdi_dir), timeout=90)


@pytest.mark.timeout(420)
def test_claim_status_and_kubectl_kae_tell_the_truth(
    cluster: Cluster, node: tuple[FixtureTree, Path]
) -> None:
    """A pod holds an HPRE: its claim's status names the device (engine, uacce name, NUMA node,
    PCI address; Ready and Healthy True); `nodes` counts it allocated and `devices` names its
    claim and pod. Isolating it turns Healthy False (reason Isolated) in the claim's status and
    in `devices`; recovery turns it back."""
    tree, _cdi = node
    cluster.apply(template("kae-read-hpre", [request("hpre", "hpre")]))
    cluster.apply(claim_pod(cluster, "kae-read-held", "kae-read-hpre", script=SLEEP))
    wait_running(cluster, "kae-read-held", timeout=120)
    [held] = allocated(pod_claim(cluster, "kae-read-held"))
    entry = wait_until(
        "the claim's status", lambda: status_entry(pod_claim(cluster, "kae-read-held"), held)
    )
    uacce = uacce_of(tree, held)
    assert entry["data"]["uacceName"] == uacce and entry["data"]["engine"] == "hpre"
    assert entry["data"]["pciBusID"] == tree.pci_address(uacce)
    assert condition(entry, "Ready")["status"] == condition(entry, "Healthy")["status"] == "True"
    [mine] = [n for n in kae(cluster, "nodes") if n["node"] == cluster.node]
    assert mine["mode"] == "dra" and mine["engines"]["hpre"]["allocated"] == 1
    assert mine["engines"]["hpre"]["total"] == 2
    [row] = [d for d in kae(cluster, "devices", "--node", cluster.node) if d["device"] == held]
    assert [c["pods"] for c in row["claims"]] == [["kae-read-held"]] and row["healthy"]

    isolate = tree.attr(uacce, "isolate")
    isolate.write_text("1\n")
    wait_until(
        "Healthy False in the claim's status",
        lambda: (
            condition(status_entry(pod_claim(cluster, "kae-read-held"), held), "Healthy").get(
                "status"
            )
            == "False"
        ),
    )
    sick = condition(status_entry(pod_claim(cluster, "kae-read-held"), held), "Healthy")
    assert sick["reason"] == "Isolated", sick
    [row] = [d for d in kae(cluster, "devices", "--node", cluster.node) if d["device"] == held]
    assert not row["healthy"] and any("isolated" in r for r in row["reasons"]), row
    isolate.write_text("0\n")
    wait_until(
        "Healthy True again",
        lambda: (
            condition(status_entry(pod_claim(cluster, "kae-read-held"), held), "Healthy").get(
                "status"
            )
            == "True"
        ),
    )


@pytest.mark.timeout(420)
def test_why_explains_what_the_scheduler_refuses(
    cluster: Cluster, node: tuple[FixtureTree, Path]
) -> None:
    """Three pods the scheduler leaves unschedulable, each explained: no HPRE here does SM2 (0
    pass the selector), an HPRE and a SEC pinned to different NUMA nodes under matchAttribute
    numaNode, and a claim pinned to an isolated HPRE (its taint named)."""
    tree, _cdi = node
    hpres = sorted(n for n in tree.names() if n.startswith("hisi_hpre"))
    secs = sorted(n for n in tree.names() if n.startswith("hisi_sec"))
    published = slice_devices(cluster)

    def numa(uacce: str) -> int:
        node: int = published[dra_name(tree, uacce)]["attributes"][
            "resource.kubernetes.io/numaNode"
        ]["int"]
        return node

    sec_far = next(s for s in secs if numa(s) != numa(hpres[0]))
    cluster.apply(template("kae-read-sm2", [request("hpre", "hpre", f"{ATTR}.alg_sm2")]))
    pair = [
        request("rsa", "hpre", f'{PCI} == "{tree.pci_address(hpres[0])}"'),
        request("cipher", "sec", f'{PCI} == "{tree.pci_address(sec_far)}"'),
    ]
    same_numa = [{"matchAttribute": "resource.kubernetes.io/numaNode"}]
    cluster.apply(template("kae-read-numa", pair, same_numa))
    cluster.apply(template("kae-read-tainted", [
        request("hpre", "hpre", f'{PCI} == "{tree.pci_address(hpres[1])}"')]))  # fmt: skip
    tree.attr(hpres[1], "isolate").write_text("1\n")
    wait_until("the taint", lambda: slice_devices(cluster)[dra_name(tree, hpres[1])].get("taints"))
    for pod, name in zip(PODS[1:], TEMPLATES[1:], strict=True):
        cluster.apply(claim_pod(cluster, pod, name, script=SLEEP))
    for pod in PODS[1:]:
        wait_until(f"{pod} unschedulable", functools.partial(unschedulable, cluster, pod))
    said = {pod: json.dumps(kae(cluster, "why", f"pod/{pod}", "-n", "default")) for pod in PODS[1:]}
    assert "0 pass" in said["kae-read-sm2"] and "alg_sm2" in said["kae-read-sm2"], said
    assert "matchAttribute resource.kubernetes.io/numaNode" in said["kae-read-numa"], said
    assert f"{DRIVER}/unhealthy=isolated" in said["kae-read-tainted"], said
    tree.attr(hpres[1], "isolate").write_text("0\n")
