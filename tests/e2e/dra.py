"""DRA pieces the e2e modules share: the node's slices, claim templates, claim pods, and the
daemon in DRA mode as a host process (with the plain DeviceClasses applied)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
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
