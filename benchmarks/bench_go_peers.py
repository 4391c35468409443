"""Ours against the Go peers on the real single-node cluster (issue 41): pod start with a DRA
claim from a template and with ``limits:``, each against the same pod served by the Go peer.

All four drivers run at once as host processes, each on its own copy of the 2-socket tree:
our device plugin (``openfuyao.com/kae.*``), the Go device plugin (``openfuyao.com/kae-go.*``),
our DRA driver (``kae.openfuyao.com``) and the Go DRA driver (``kae-go.openfuyao.com``), each
DRA driver with its own DeviceClass, so every kind of pod sees the same node and the same
noise. The kinds are interleaved and their order rotated from one round to the next; each pod
starts only once the last one and its claim are gone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_cluster import NAMESPACE, pod_manifest, running, served_plugin
from bench_core import Figure, median, p99
from bench_dra import served_dra
from go_peers import build, devices
from kube_watch import KubeApi, Watch

from tests.e2e.cluster import Cluster, FixtureTree, Plugin, wait_until
from tests.e2e.dra import request, template

TREE = "kunpeng920-2p"
GO_DRIVER = "kae-go.openfuyao.com"
GO_PREFIX = "openfuyao.com/kae-go."
TEMPLATES = {"ours": "kae-bench-ours", "go": "kae-bench-go"}
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
MakeTree = Callable[[Path], FixtureTree]  # a tree built under the given directory
KINDS = ("claim-ours", "claim-go", "limits-ours", "limits-go")
TIMEOUT = 120.0


def _go_class() -> dict[str, Any]:
    """The Go driver's HPRE class: our class's selector with its driver name."""
    expression = (
        f'device.driver == "{GO_DRIVER}" && device.attributes["{GO_DRIVER}"].engine == "hpre"'
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"hpre.{GO_DRIVER}"},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def _listing(cluster: Cluster, tree: FixtureTree, path: Path) -> Path:
    path.write_text(json.dumps(devices(tree.sys, tree.dev, cluster.node)), encoding="utf-8")
    return path


@contextmanager
def _process(args: list[str], log: Path) -> Iterator[Plugin]:
    """A Go peer as the e2e tests run our daemon (``Plugin``: start, stop, its process)."""
    peer = Plugin(args, log, metrics_port=0)
    peer.start()
    try:
        yield peer
    finally:
        peer.stop()


@contextmanager
def go_dra(
    cluster: Cluster, binary: Path, work: Path, tree: FixtureTree | None = None
) -> Iterator[tuple[Plugin, FixtureTree]]:
    """The Go DRA driver on ``tree`` (else a fresh copy of the 2-socket tree), its pool
    published and its class applied."""
    work.mkdir(parents=True, exist_ok=True)
    tree = tree or FixtureTree.copy(TREE, work)
    cluster.apply(_go_class())
    args = [
        str(binary), "--driver", GO_DRIVER, "--node-name", cluster.node,
        "--kubeconfig", cluster.kubeconfig, "--kubelet-root", str(cluster.kubelet_root),
        "--cdi-dir", str(cluster.kubelet_root.parent / "cdi"),
        "--devices", str(_listing(cluster, tree, work / "devices.json")),
        "--sysfs-root", str(tree.sys), "--dev-root", str(tree.dev),
    ]  # fmt: skip
    try:
        with _process(args, work / "go-dra.log") as process:
            selector = f"--field-selector=spec.driver={GO_DRIVER}"
            wait_until(
                "the Go driver's slices",
                lambda: cluster.get("resourceslices", selector)["items"] or None,
                60,
            )
            yield process, tree
    finally:
        cluster.kubectl("delete", "resourceslices", f"--field-selector=spec.driver={GO_DRIVER}",
                        check=False)  # fmt: skip
        cluster.kubectl("delete", "deviceclass", f"hpre.{GO_DRIVER}", check=False)


@contextmanager
def go_plugin(
    cluster: Cluster, binary: Path, work: Path, tree: FixtureTree | None = None
) -> Iterator[tuple[Plugin, FixtureTree]]:
    """The Go device plugin on ``tree`` (else a fresh copy of the 2-socket tree), its HPREs
    allocatable on the node."""
    work.mkdir(parents=True, exist_ok=True)
    tree = tree or FixtureTree.copy(TREE, work)
    hpres = str(tree.counts()["hpre"])
    args = [
        str(binary), "--device-plugin-dir", str(cluster.kubelet_root / "device-plugins"),
        "--resource-prefix", GO_PREFIX,
        "--devices", str(_listing(cluster, tree, work / "devices.json")),
        "--sysfs-root", str(tree.sys), "--dev-root", str(tree.dev),
    ]  # fmt: skip
    with _process(args, work / "go-dp.log") as process:
        wait_until(
            "the Go plugin's HPREs allocatable",
            lambda: (
                cluster.get("node", cluster.node)["status"]
                .get("allocatable", {})
                .get(GO_PREFIX + "hpre")
                == hpres
                or None
            ),
            60,
        )
        yield process, tree


def _manifest(cluster: Cluster, kind: str, name: str) -> dict[str, Any]:
    pod = pod_manifest(cluster, name, {})
    container = pod["spec"]["containers"][0]
    driver = kind.split("-")[1]
    if kind.startswith("claim"):
        container["resources"] = {"claims": [{"name": "kae"}]}
        pod["spec"]["resourceClaims"] = [
            {"name": "kae", "resourceClaimTemplateName": TEMPLATES[driver]}
        ]
    else:
        resource = ("openfuyao.com/kae." if driver == "ours" else GO_PREFIX) + "hpre"
        container["resources"] = {"limits": {resource: 1}}
    return pod


def _no_claims(api: KubeApi) -> bool:
    return not api.request("GET", CLAIMS).get("items")


def _start(cluster: Cluster, api: KubeApi, pods: Watch, kind: str, name: str) -> float:
    """Create to Running of one pod; it is deleted and its claim gone before this returns."""
    posted = time.monotonic()
    api.request("POST", PODS, _manifest(cluster, kind, name))
    started = 0.0
    while not started:
        at, _, pod = pods.next(posted + TIMEOUT)
        if pod["metadata"]["name"] == name and running(pod):
            started = at
    api.request("DELETE", f"{PODS}/{name}", {"gracePeriodSeconds": 0})
    while True:
        _, event, pod = pods.next(time.monotonic() + TIMEOUT)
        if pod["metadata"]["name"] == name and event == "DELETED":
            break
    wait_until("the pod's claim gone", lambda: _no_claims(api) or None, TIMEOUT)
    return started - posted


@dataclass
class Four:
    """The four drivers serving one node, each on its own copy of the tree."""

    drivers: dict[str, Plugin]  # by kind: "dp-ours", "dp-go", "dra-ours", "dra-go"
    trees: dict[str, FixtureTree]


@contextmanager
def four_drivers(
    cluster: Cluster,
    work: Path,
    make_tree: MakeTree | None = None,
    ours_dp_extra: Sequence[str] = (),
) -> Iterator[Four]:
    """Ours and the Go peers, both modes, serving at once, with each DRA driver's template;
    ``make_tree`` gives each its tree (else the 2-socket fixture), ``ours_dp_extra`` are more
    arguments of our device plugin."""
    binaries = build()
    # Our two daemons would see each other's pods through the kubelet's pod-resources API (the
    # copies of the tree share PCI addresses) and take those devices out of their own pools,
    # republishing each time, which a node in one mode never does: neither is given the socket.
    alone = ("--pod-resources-socket", str(work / "no-pod-resources.sock"))

    def tree(name: str) -> FixtureTree | None:
        return make_tree(work / name) if make_tree else None

    with ExitStack() as stack:
        served = {
            "dp-ours": served_plugin(
                cluster, work / "dp", "plugin-watcher", tree("dp"), [*alone, *ours_dp_extra]
            ),
            "dp-go": go_plugin(cluster, binaries["deviceplugin"], work / "go-dp", tree("go-dp")),
            "dra-ours": served_dra(cluster, work / "dra", tree("dra"), alone),
            "dra-go": go_dra(cluster, binaries["dra"], work / "go-dra", tree("go-dra")),
        }
        both = {kind: stack.enter_context(manager) for kind, manager in served.items()}
        cluster.apply(template(TEMPLATES["ours"], [request("hpre", "hpre")]))
        go_template = template(TEMPLATES["go"], [request("hpre", "hpre")])
        go_template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = (
            f"hpre.{GO_DRIVER}"
        )
        cluster.apply(go_template)
        try:
            yield Four({k: v[0] for k, v in both.items()}, {k: v[1] for k, v in both.items()})
        finally:
            for name in TEMPLATES.values():
                cluster.kubectl("delete", "resourceclaimtemplate", name, check=False)


def pod_start(
    cluster: Cluster, api: KubeApi, work: Path, samples: int, *, view: bool = True
) -> list[Figure]:
    """Create-to-Running of each kind, ``samples`` pods each, rotated; two rows of ratios.
    ``view`` False: only the ``limits:`` pods, our plugin giving no container a sysfs view
    (``--container-sysfs-view off``), which the Go plugin has no equivalent of: what is left
    of the gap without those bind mounts."""
    kinds = KINDS if view else ("limits-ours", "limits-go")
    extra = () if view else ("--container-sysfs-view", "off")
    times: dict[str, list[float]] = {k: [] for k in kinds}
    selector = f"{PODS}?labelSelector=kae-bench%3Dpod-start"
    with four_drivers(cluster, work, ours_dp_extra=extra), Watch(api, selector) as pods:
        for i in range(samples):
            for kind in kinds[i % len(kinds) :] + kinds[: i % len(kinds)]:
                name = f"bench-{kind}-{i}"
                times[kind].append(_start(cluster, api, pods, kind, name))
    if not view:
        return [_figure(times, "limits", samples, " without the sysfs view")]
    return [_figure(times, "claim", samples), _figure(times, "limits", samples)]


def _figure(times: dict[str, list[float]], how: str, samples: int, variant: str = "") -> Figure:
    ours, go = times[f"{how}-ours"], times[f"{how}-go"]
    ratio = median(ours) / median(go)
    peer = "the Go DRA driver on the upstream helper" if how == "claim" else "the Go plugin"
    return Figure(
        key=f"go_peer_pod_start_{how}" + ("_no_view" if variant else ""),
        label=f"pod start with {'a claim' if how == 'claim' else 'limits:'}, ours{variant} "
        f"({samples})",
        unit="s",
        median=median(ours),
        p99=p99(ours),
        ratio=ratio,
        reference=f"{peer} {median(go):.3f} s (p99 {p99(go):.3f})",
        target="<= 1.05x",
        met=ratio <= 1.05,
        note="create to Running through an API watch, ours and the peer's pods interleaved",
        samples=ours,
    )
