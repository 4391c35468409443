"""A small cluster for the kubectl plugin's tests, seeded into the HTTP test API server.

Slices are what the real driver builds (``dra.slices.build_slices``) for checked-in fixture
trees; DeviceClasses are the shipped ones (deploy/dra/deviceclasses.yaml); claims are shaped as
the API server returns them (``tests.support.dra_claims``). The nodes:

* ``worker-1``: DRA, kunpeng920-2p (HPRE, SEC, ZIP on NUMA nodes 0 and 2), ZIP shared by queues.
* ``worker-2``: DRA, the ``faults`` tree: every device tainted unhealthy but zip-0000-b5-00-0.
* ``worker-3``: device plugin: capacity and allocatable of openfuyao.com/kae.*.
* ``plain-1``: no KAE device, opted out of the chart.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result

from kae_deviceplugin.discovery.queues import QueueTotals
from kae_deviceplugin.dra.slice_devices import DeviceOptions
from kae_deviceplugin.dra.slices import NodeRef, build_slices
from kae_deviceplugin.kubectl.main import cli
from tests.dra.inventories import FIXTURES, fixture_inventory
from tests.support.dra_claims import Result as Allocated
from tests.support.dra_claims import claim_object
from tests.support.http_apiserver import HttpApiServer

JsonObject = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
DRA_1, DRA_2, PLUGIN, PLAIN = "worker-1", "worker-2", "worker-3", "plain-1"
HPRE_0, HPRE_2 = "hpre-0000-79-00-0", "hpre-0000-b9-00-0"  # NUMA nodes 0 and 2
SEC_0, SEC_2 = "sec-0000-76-00-0", "sec-0000-b6-00-0"
ZIP_0, ZIP_2 = "zip-0000-75-00-0", "zip-0000-b5-00-0"
HPRE_CLASS, SEC_CLASS, ZIP_CLASS = (f"{e}.kae.openfuyao.com" for e in ("hpre", "sec", "zip"))


def dra_slices(tree: str, node: str, held: dict[str, str] | None = None) -> list[JsonObject]:
    """The slices the driver publishes for ``tree`` on ``node``: taints on, ZIP shared."""
    inventory = fixture_inventory(tree)
    queues = QueueTotals(FIXTURES / tree / "sys").update(inventory)
    options = DeviceOptions("NoSchedule", frozenset({"zip"}), held or {})
    node_ref = NodeRef(node, str(uuid.uuid4()))
    return list(
        build_slices(inventory, node_ref, generation=1, queues=queues, options=options).slices
    )


def device_classes() -> list[JsonObject]:
    text = (REPO / "deploy" / "dra" / "deviceclasses.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def node(
    name: str, *, labels: dict[str, str] | None = None, **status: dict[str, str]
) -> JsonObject:
    """A Node; ``status`` holds capacity and allocatable."""
    meta = {"name": name, "uid": str(uuid.uuid4()), "labels": labels or {}}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": {}, "status": status}


def claim(
    namespace: str,
    name: str,
    results: Sequence[Allocated] | None,
    *,
    pods: Sequence[str] = (),
    devices: JsonObject | None = None,
) -> JsonObject:
    """A ResourceClaim; allocated with ``results`` and reserved for ``pods``."""
    made = claim_object(namespace, name, results)
    if devices is not None:
        made["spec"]["devices"] = devices
    if pods:
        made["status"]["reservedFor"] = [
            {"resource": "pods", "name": p, "uid": str(uuid.uuid4())} for p in pods
        ]
    return made


def pod(
    namespace: str,
    name: str,
    *,
    node_name: str | None = None,
    phase: str = "Pending",
    claims: Sequence[JsonObject] = (),
    limits: dict[str, str] | None = None,
    spec: JsonObject | None = None,
) -> JsonObject:
    """A pod whose one container asks ``limits`` and uses every entry of ``claims``."""
    container: JsonObject = {"name": "app", "image": "app", "resources": {}}
    if limits:
        container["resources"]["limits"] = limits
    if claims:
        container["resources"]["claims"] = [{"name": c["name"]} for c in claims]
    body: JsonObject = {"containers": [container], "resourceClaims": list(claims), **(spec or {})}
    if node_name:
        body["nodeName"] = node_name
    meta = {"namespace": namespace, "name": name, "uid": str(uuid.uuid4())}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body,
            "status": {"phase": phase}}  # fmt: skip


def template(namespace: str, name: str, devices: JsonObject) -> JsonObject:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"spec": {"devices": devices}},
    }


def exactly(name: str, device_class: str, **more: Any) -> JsonObject:
    """A request of ``device_class``; ``more`` goes into ``exactly`` (selectors, count...)."""
    return {"name": name, "exactly": {"deviceClassName": device_class, **more}}


def selector(expression: str) -> JsonObject:
    return {"cel": {"expression": expression}}


def seed_cluster(api: HttpApiServer) -> None:
    """The four nodes, their slices, the classes, two claims on worker-1 and the
    device-plugin pods of worker-3."""
    api.seed("nodes", node(DRA_1))
    api.seed("nodes", node(DRA_2))
    kae = {
        "openfuyao.com/kae.hpre": "2",
        "openfuyao.com/kae.sec": "2",
        "openfuyao.com/kae.zip": "2",
    }
    allocatable = {**kae, "openfuyao.com/kae.sec": "1", "cpu": "64"}
    api.seed("nodes", node(PLUGIN, capacity={**kae, "cpu": "64"}, allocatable=allocatable))
    api.seed("nodes", node(PLAIN, labels={"openfuyao.com/kae.deploy.device-plugin": "false"}))
    for obj in [*dra_slices("kunpeng920-2p", DRA_1), *dra_slices("faults", DRA_2)]:
        api.seed("resourceslices", obj)
    for obj in device_classes():
        api.seed("deviceclasses", obj)
    api.seed(
        "resourceclaims", claim("team-a", "c1", [Allocated("rsa", HPRE_0, DRA_1)], pods=["app-1"])
    )
    share = Allocated("zip", ZIP_0, DRA_1, share_id=str(uuid.uuid4()), consumed_queues="8")
    api.seed("resourceclaims", claim("team-b", "z1", [share], pods=["zipper"]))
    hpre_one = {"openfuyao.com/kae.hpre": "1"}
    api.seed("pods", pod("shop", "dp-app", node_name=PLUGIN, phase="Running", limits=hpre_one))
    api.seed("pods", pod("shop", "dp-done", node_name=PLUGIN, phase="Succeeded", limits=hpre_one))


def kubectl_kae(api: HttpApiServer, tmp_path: Path, *args: str) -> Result:
    """``kubectl kae ARGS --kubeconfig <the test server's>``, in this process."""
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    return CliRunner().invoke(cli, [*args, "--kubeconfig", str(kubeconfig)])
