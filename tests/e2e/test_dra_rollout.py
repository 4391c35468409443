"""The chart's own surge rollout in DRA mode, with claims (issue 27), on the pod network.

The driver pod runs without `hostNetwork` and reaches the API server at the `kubernetes`
Service's address, as pods of a real cluster do (scripts/cluster/up makes the one rule kube-proxy
would make for it). So the chart's `maxSurge: 1` update can run: the new pod starts beside the old
one, both register with the kubelet under their pod UIDs, the old one keeps publishing the pool
while the new one stands by, and the new one takes over when the old one stops.

The upgrade changes the pod template by an annotation, and delays the new pod's first readiness
probe by HOLD seconds: the DaemonSet removes the old pod as soon as the new one is Ready, so the
delay keeps both instances registered long enough for a claim to be prepared while they overlap
(a real upgrade's overlap is the new pod's start-up time, a few seconds). A second upgrade, with
no hold, then shows the chart's own pace.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import Cluster, FixtureTree, wait_until
from tests.e2e.dra import (
    DRIVER,
    SliceWatch,
    allocated,
    assert_release_left_nothing,
    cdi_specs,
    checkpoint_claims,
    claim_pod,
    claim_uid,
    delete_template,
    pod_claim,
    request,
    slice_devices,
    slices,
    template,
    uacce_of,
)
from tests.e2e.helm import Release, chart_values
from tests.e2e.pods import read_report, wait_running
from tests.e2e.test_helm import helm_binary, plugin_image

# What the stack must have (tests/e2e/stack.py): on one that lacks it the module skips, naming why.
pytestmark = pytest.mark.needs("dra", "cdi")

__all__ = ["helm_binary", "plugin_image"]  # module fixtures shared with test_helm.py

TREE = "kunpeng920-2p"
NAMESPACE = "kae-rollout"
RELEASE = "kae-rollout"
ENGINES = ("hpre", "sec", "zip")
# Claim pods: one prepared before the rollout, one while the two driver pods overlap, one after
# the handover, each holding a device of another engine.
BEFORE, DURING, AFTER = "kae-roll-before", "kae-roll-during", "kae-roll-after"
PODS = {BEFORE: "hpre", DURING: "sec", AFTER: "zip"}
HOLD = 15  # seconds before the new pod's first readiness probe (see the module's docstring)


def rollout_values(cluster: Cluster, tree: FixtureTree, image: str, base: Path) -> dict[str, Any]:
    """The e2e chart values plus DRA mode and the runtime's CDI dir; the chart's default pod
    network and in-cluster API address (no hostNetwork, no extraEnv)."""
    values = chart_values(cluster, tree, image, base / "host")
    values["dra"] = {"enabled": True}
    values["cdi"] = {"specDir": str(cluster.state / "cdi")}
    return values


@pytest.fixture(scope="module")
def rollout(
    cluster: Cluster, helm_binary: str, plugin_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Release, FixtureTree]]:
    """The chart installed in DRA mode on the pod network; uninstalled (and its namespace
    deleted) at the end."""
    base = tmp_path_factory.mktemp("helm-rollout")
    tree = FixtureTree.copy(TREE, base)
    path = base / "values.json"
    path.write_text(json.dumps(rollout_values(cluster, tree, plugin_image, base)))
    installed = Release(helm_binary, cluster, RELEASE, NAMESPACE)
    installed.install(path)
    try:
        yield installed, tree
    finally:
        for pod in PODS:
            cluster.delete_pod(pod)
        for engine in ENGINES:
            delete_template(cluster, f"kae-roll-{engine}")
        installed.uninstall()
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true")


def registration(uid: str) -> str:
    """The registration socket's name of the driver pod with this UID."""
    return f"{DRIVER}-{uid}-reg.sock"


def registered(cluster: Cluster) -> set[str]:
    """The driver's registration sockets in the kubelet's plugins_registry."""
    return {p.name for p in (cluster.kubelet_root / "plugins_registry").glob(f"{DRIVER}-*")}


def uid(pod: dict[str, Any]) -> str:
    """A pod's UID."""
    found: str = pod["metadata"]["uid"]
    return found


def container(cluster: Cluster, pod: str) -> dict[str, Any]:
    """The pod's one container status."""
    [status] = cluster.get("pod", pod)["status"]["containerStatuses"]
    found: dict[str, Any] = status
    return found


def sees_its_device(cluster: Cluster, tree: FixtureTree, pod: str) -> str:
    """The pool device the pod's claim was allocated, after checking its container sees that
    device's /dev node and no other."""
    [device] = allocated(pod_claim(cluster, pod))
    report = read_report(cluster, pod)
    assert report.dev == {uacce_of(tree, device)}, (pod, device, report)
    return device


def pod_log(cluster: Cluster, name: str) -> str:
    """A driver pod's log, readiness probes left out."""
    text = cluster.kubectl("logs", "-n", NAMESPACE, name)
    return "\n".join(line for line in text.splitlines() if "GET /" not in line)


def surge_pod(chart: Release, old: dict[str, Any]) -> dict[str, Any] | None:
    """The release's driver pod that is not `old`, once the DaemonSet made it."""
    return next((p for p in chart.pods() if uid(p) != uid(old)), None)


def handed_over(cluster: Cluster, chart: Release, new: dict[str, Any]) -> None:
    """Wait until `new` is the release's only driver pod, alone registered, and says it took
    over publishing the pool after standing by."""
    wait_until(
        "the old pod gone",
        lambda: [uid(p) for p in chart.pods(terminating=True)] == [uid(new)],
        timeout=120,
    )
    name = new["metadata"]["name"]
    wait_until("the new pod took over", lambda: "took over" in pod_log(cluster, name), timeout=60)
    log = pod_log(cluster, name)
    assert log.index("standing by") < log.index("took over publishing"), log
    assert registered(cluster) == {registration(uid(new))}


@pytest.mark.timeout(600)
def test_a_surge_rollout_hands_the_pool_over_and_loses_no_claim(
    cluster: Cluster, rollout: tuple[Release, FixtureTree], tmp_path: Path
) -> None:
    """`helm upgrade` that changes the pod template: the surge pod registers beside the old one
    and stands by; a claim pod started while both are registered runs (the kubelet calls the
    newest instance), its record joining the old instance's in the one checkpoint; the old pod
    goes, the new one logs that it took over, and a claim pod after the handover runs too. A
    second upgrade, with no hold, hands over again in a few seconds. The pod prepared before the
    rollouts keeps its container (same ID, restart count 0) and its spec; the pool's slice is
    written at most twice over both rollouts and its generation stays, so no two instances
    fought over it."""
    chart, tree = rollout
    old = wait_until("driver pod Ready", chart.ready_pod, timeout=240)
    wait_until("the pool", lambda: len(slice_devices(cluster)) == len(tree.names()), timeout=60)
    for engine in ENGINES:
        cluster.apply(template(f"kae-roll-{engine}", [request(engine, engine)]))
    cluster.apply(claim_pod(cluster, BEFORE, f"kae-roll-{PODS[BEFORE]}"))
    wait_running(cluster, BEFORE, timeout=120)
    devices = {BEFORE: sees_its_device(cluster, tree, BEFORE)}
    first = container(cluster, BEFORE)
    generations = {s["spec"]["pool"]["generation"] for s in slices(cluster)}

    with SliceWatch(cluster, tmp_path / "slice-events.json") as watch:
        started = time.monotonic()
        chart.upgrade(
            "podAnnotations.kae-e2e/rollout=second", f"readinessProbe.initialDelaySeconds={HOLD}"
        )
        new = wait_until("the surge pod", lambda: surge_pod(chart, old), timeout=60)
        both = {registration(uid(old)), registration(uid(new))}
        wait_until("both instances registered", lambda: registered(cluster) == both, timeout=60)
        overlap = time.monotonic() - started
        cluster.apply(claim_pod(cluster, DURING, f"kae-roll-{PODS[DURING]}"))
        wait_running(cluster, DURING, timeout=120)
        during = time.monotonic() - started
        # Still overlapping when that pod ran: the old pod not yet asked to stop, both sockets.
        [still] = [p for p in chart.pods(terminating=True) if uid(p) == uid(old)]
        assert not still["metadata"].get("deletionTimestamp"), "the overlap ended too soon"
        assert registered(cluster) == both
        recorded = checkpoint_claims(cluster)
        assert {claim_uid(cluster, BEFORE), claim_uid(cluster, DURING)} <= recorded.keys()
        handed_over(cluster, chart, new)
        handover = time.monotonic() - started
        cluster.apply(claim_pod(cluster, AFTER, f"kae-roll-{PODS[AFTER]}"))
        wait_running(cluster, AFTER, timeout=120)
        after = time.monotonic() - started

        # The chart's own pace: the next pod Ready at its first probe (the install's 1 s).
        started = time.monotonic()
        chart.upgrade(
            "podAnnotations.kae-e2e/rollout=third", "readinessProbe.initialDelaySeconds=1"
        )
        newest = wait_until("the next surge pod", lambda: surge_pod(chart, new), timeout=60)
        handed_over(cluster, chart, newest)
        again = time.monotonic() - started
        writes = watch.writes()

    print(
        f"rollout: both registered {overlap:.1f} s after the upgrade, the claim pod started "
        f"then ran at {during:.1f} s, old pod gone and new one publishing at {handover:.1f} s "
        f"({HOLD} s of it the hold), the claim pod after the handover ran at {after:.1f} s; "
        f"the second rollout, no hold, handed over in {again:.1f} s; {len(writes)} slice writes"
    )
    for pod in (DURING, AFTER):
        devices[pod] = sees_its_device(cluster, tree, pod)
    assert len(set(devices.values())) == 3, devices
    now = container(cluster, BEFORE)
    assert (now["containerID"], now["restartCount"]) == (first["containerID"], 0), now
    assert "running" in now["state"], now
    recorded = checkpoint_claims(cluster)
    assert recorded.keys() == {claim_uid(cluster, pod) for pod in PODS}
    # Each claim's spec is where its record says: no later instance's start-up reconcile took
    # the spec of a claim an earlier one prepared.
    for claim in recorded.values():
        assert (cluster.state / "cdi" / claim["cdiSpec"]).is_file(), claim
    assert len(writes) <= 2, [
        (w["type"], w["object"]["metadata"]["resourceVersion"]) for w in writes
    ]
    assert all(w["type"] == "MODIFIED" for w in writes), [w["type"] for w in writes]
    seen = {w["object"]["spec"]["pool"]["generation"] for w in writes}
    assert seen <= generations, (seen, generations)


@pytest.mark.timeout(300)
def test_uninstall_after_the_rollout_leaves_nothing(
    cluster: Cluster, rollout: tuple[Release, FixtureTree]
) -> None:
    """With the three claim pods deleted, the third instance unprepares all three claims, those
    the first and second instances prepared included (no spec, no checkpoint record); `helm
    uninstall` then leaves no slice, socket or cluster object of the release."""
    chart, _tree = rollout
    for pod in PODS:
        cluster.delete_pod(pod)
    cdi_dir = cluster.state / "cdi"
    wait_until(
        "the claims unprepared",
        lambda: not cdi_specs(cdi_dir) and not checkpoint_claims(cluster),
        timeout=90,
    )
    chart.uninstall()
    assert_release_left_nothing(cluster, RELEASE)
