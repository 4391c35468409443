"""DRA pieces the e2e modules share: the node's slices, claim templates, claim pods, and the
daemon in DRA mode as a host process (with the plain DeviceClasses applied)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.e2e.cluster import (
    ENGINES,
    REPO,
    Cluster,
    FixtureTree,
    Plugin,
    make_plugin,
    wait_until,
)
from tests.e2e.pods import manifest

DRIVER = "kae.openfuyao.com"
CLASSES = REPO / "deploy" / "dra" / "deviceclasses.yaml"
SLEEP = "sleep 3600"


def slices(cluster: Cluster) -> list[dict[str, Any]]:
    """The driver's ResourceSlices of this node, as the API server holds them."""
    found = cluster.get(
        "resourceslices", f"--field-selector=spec.driver={DRIVER},spec.nodeName={cluster.node}"
    )
    items: list[dict[str, Any]] = found["items"]
    return items


def driver_slices_anywhere(cluster: Cluster) -> list[str]:
    """Names of the driver's slices on any node."""
    found = cluster.get("resourceslices", f"--field-selector=spec.driver={DRIVER}")
    return [s["metadata"]["name"] for s in found["items"]]


def slice_devices(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Every published device of this node by name."""
    # An empty slice reads devices: null from a 1.34 server (no omitempty there), none from 1.37.
    return {d["name"]: d for s in slices(cluster) for d in s["spec"].get("devices") or []}


def request(name: str, engine: str, *selectors: str, **exactly: Any) -> dict[str, Any]:
    """One claim request for a device of `engine`'s class, narrowed by CEL `selectors`."""
    spec: dict[str, Any] = {"deviceClassName": f"{engine}.{DRIVER}", **exactly}
    if selectors:
        spec["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": spec}


def template(
    name: str, requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A ResourceClaimTemplate in `default` with these requests."""
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": devices}},
    }


def claim_pod(
    cluster: Cluster, name: str, template_name: str, script: str | None = None
) -> dict[str, Any]:
    """A pod whose one container holds the claim made from `template_name`."""
    pod = (
        manifest(cluster, name, {})
        if script is None
        else manifest(cluster, name, {}, script=script)
    )
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "kae"}]}
    pod["spec"]["resourceClaims"] = [{"name": "kae", "resourceClaimTemplateName": template_name}]
    return pod


def pod_claim(cluster: Cluster, pod: str) -> dict[str, Any]:
    """The ResourceClaim the scheduler made for the pod's claim ``kae``."""
    status = cluster.get("pod", pod).get("status", {})
    [entry] = [s for s in status.get("resourceClaimStatuses", []) if s["name"] == "kae"]
    claim: dict[str, Any] = cluster.get("resourceclaim", entry["resourceClaimName"])
    return claim


def allocated(claim: dict[str, Any]) -> list[str]:
    """The device names the claim was allocated, in result order."""
    results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    return [r["device"] for r in results]


def cdi_specs(cdi_dir: Path) -> list[Path]:
    """The daemon's per-claim CDI specs in the runtime's spec directory."""
    return sorted(cdi_dir.glob("openfuyao.com-kae_*.json"))


def dra_args(cluster: Cluster, cdi_dir: Path) -> list[str]:
    """What `serve` needs beyond make_plugin's defaults to run in DRA mode on this cluster."""
    return ["--mode", "dra", "--node-name", cluster.node, "--kubeconfig", cluster.kubeconfig,
            "--cdi-dir", str(cdi_dir), "--runtime-config", str(cluster.runtime_config)]  # fmt: skip


@contextmanager
def running_dra_plugin(
    cluster: Cluster,
    tree: FixtureTree,
    workdir: Path,
    extra: list[str] | None = None,
    pod_uid: str | None = None,
    *,
    ready: bool = True,
) -> Iterator[tuple[Plugin, Path]]:
    """The daemon in DRA mode on `tree` (as the pod `pod_uid`, for per-pod socket names), the
    DeviceClasses applied, reading the cluster's containerd config; waits for /readyz unless
    `ready` is False (then for /readyz to answer at all). On exit the daemon stops and its
    slices and the classes are deleted, so the next test starts from an empty pool."""
    cdi_dir = cluster.kubelet_root.parent / "cdi"
    workdir.mkdir(parents=True, exist_ok=True)
    plugin = make_plugin(
        cluster, tree, workdir, "plugin-watcher", extra=dra_args(cluster, cdi_dir) + (extra or [])
    )
    if pod_uid is not None:
        plugin.env["POD_UID"] = pod_uid
    cluster.kubectl("apply", "-f", str(CLASSES))
    plugin.start()
    try:
        if ready:
            plugin.wait_ready()
        else:
            wait_until("/readyz answering", lambda: plugin.readyz()[1] or None)
        yield plugin, cdi_dir
    finally:
        plugin.stop()
        cluster.kubectl(
            "delete", "resourceslices", f"--field-selector=spec.driver={DRIVER}", check=False
        )
        cluster.kubectl("delete", "-f", str(CLASSES), "--ignore-not-found", check=False)


class DraDrivers:
    """DRA daemons started one by one on fresh trees (``start``), each once its pool is in
    the API; ``close`` stops them all once the kubelet has unprepared every claim: the caller
    deletes its pods first, or the claims' CDI specs outlive the test in the runtime's dir."""

    def __init__(
        self,
        cluster: Cluster,
        tree_factory: Callable[[str], FixtureTree],
        workdir: Path,
        tree_name: str,
    ) -> None:
        self.cluster, self.tree_factory = cluster, tree_factory
        self.workdir, self.tree_name = workdir, tree_name
        self.started: list[AbstractContextManager[tuple[Plugin, Path]]] = []

    def start(self, extra: list[str]) -> tuple[Plugin, FixtureTree]:
        tree = self.tree_factory(self.tree_name)
        context = running_dra_plugin(self.cluster, tree, self.workdir, extra)
        plugin, _cdi = context.__enter__()
        self.started.append(context)
        wait_until("the pool", lambda: len(slice_devices(self.cluster)) == len(tree.names()))
        return plugin, tree

    def close(self) -> None:
        if self.started:
            cdi_dir = self.cluster.kubelet_root.parent / "cdi"
            wait_until("every claim unprepared", lambda: not cdi_specs(cdi_dir), timeout=90)
        for context in reversed(self.started):
            context.__exit__(None, None, None)


def delete_template(cluster: Cluster, name: str) -> None:
    """Delete a ResourceClaimTemplate, if present."""
    cluster.kubectl("delete", "resourceclaimtemplate", name, "--ignore-not-found", check=False)


def dra_name(tree: FixtureTree, uacce: str) -> str:
    """The pool's name of a tree device: engine and PCI address as a DNS label."""
    engine = ENGINES[uacce.rsplit("-", 1)[0]]
    return f"{engine}-" + tree.pci_address(uacce).replace(":", "-").replace(".", "-")


def uacce_of(tree: FixtureTree, device: str) -> str:
    """The tree's uacce name of a pool device name."""
    return next(n for n in tree.names() if dra_name(tree, n) == device)


def resource_health(cluster: Cluster, pod: str) -> dict[str, str]:
    """resourceID -> health of every allocated resource the kubelet reports for the pod."""
    status: dict[str, Any] = cluster.get("pod", pod).get("status", {})
    return {
        res["resourceID"]: res.get("health", "")
        for container in status.get("containerStatuses", [])
        for entry in container.get("allocatedResourcesStatus") or []
        for res in entry.get("resources") or []
    }


def health_of(cluster: Cluster, pod: str, device: str) -> str | None:
    """The health the pod's status gives `device`. For a DRA device the kubelet's resource ID is
    the claim's CDI device ID, ``openfuyao.com/kae=<claim uid>-<device>``: it ends in the name."""
    found = [h for rid, h in resource_health(cluster, pod).items() if rid.endswith(device)]
    return found[0] if found else None


def driver_dir(cluster: Cluster) -> Path:
    """The driver's directory under the kubelet's: service sockets, checkpoint and locks."""
    return cluster.kubelet_root / "plugins" / DRIVER


def checkpoint_claims(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The claims the driver's checkpoint file records, by UID (none without a file). Every
    instance on the node shares this file; it is replaced by a rename, so a read sees a whole
    version."""
    path = driver_dir(cluster) / "checkpoint.json"
    if not path.exists():
        return {}
    claims: dict[str, dict[str, Any]] = json.loads(path.read_text())["claims"]
    return claims


def claim_uid(cluster: Cluster, pod: str) -> str:
    """The UID of the pod's claim ``kae``."""
    uid: str = pod_claim(cluster, pod)["metadata"]["uid"]
    return uid


class SliceWatch:
    """Every change the API server makes to this node's slices while the context is open, as
    `kubectl get --watch` reports them: each write is one event, however briefly it stood, which
    polling could miss. The watch starts with the slices as they are (one ADDED each)."""

    def __init__(self, cluster: Cluster, path: Path) -> None:
        self.cluster = cluster
        self.path = path
        self.proc: subprocess.Popen[bytes] | None = None
        self.initial = 0

    def __enter__(self) -> SliceWatch:
        self.initial = len(slices(self.cluster))
        with self.path.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(self.cluster.bin / "kubectl"), "--kubeconfig", self.cluster.kubeconfig,
                 "get", "resourceslices",
                 f"--field-selector=spec.driver={DRIVER},spec.nodeName={self.cluster.node}",
                 "--watch", "--output-watch-events", "-o", "json"],
                stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        wait_until("the slice watch started", lambda: len(self.events()) >= self.initial)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def events(self) -> list[dict[str, Any]]:
        """The watch events so far (a last one still being written is left out)."""
        text = self.path.read_text() if self.path.exists() else ""
        decoder = json.JSONDecoder()
        found: list[dict[str, Any]] = []
        at = 0
        while True:
            while at < len(text) and text[at].isspace():
                at += 1
            if at == len(text):
                return found
            try:
                event, at = decoder.raw_decode(text, at)
            except json.JSONDecodeError:
                return found
            found.append(event)

    def writes(self) -> list[dict[str, Any]]:
        """The events after the initial listing: every create, update and delete of a slice."""
        return self.events()[self.initial :]


def assert_release_left_nothing(cluster: Cluster, release: str) -> None:
    """What `helm uninstall` of a DRA release must leave, with its workloads gone first: no
    slice of the driver (the kubelet deletes them once the driver is gone), no registration or
    service socket, no claim CDI spec, no claim in the checkpoint, and no DeviceClass,
    ClusterRole or admission policy of the release."""
    wait_until("no slice left", lambda: not driver_slices_anywhere(cluster), 90)
    registry = cluster.kubelet_root / "plugins_registry"
    assert not list(registry.glob(f"{DRIVER}*")), list(registry.iterdir())
    assert not list(driver_dir(cluster).glob("*.sock")), list(driver_dir(cluster).iterdir())
    assert cdi_specs(cluster.state / "cdi") == []
    assert checkpoint_claims(cluster) == {}
    for kind in ("deviceclasses", "clusterroles", "clusterrolebindings",
                 "validatingadmissionpolicies", "validatingadmissionpolicybindings"):  # fmt: skip
        found = cluster.get(kind, "-l", f"app.kubernetes.io/instance={release}")["items"]
        assert [item["metadata"]["name"] for item in found] == [], kind
