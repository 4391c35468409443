"""The scheduling benchmark's objects: an async client, the nodes, their slices, the chart's
DeviceClasses, the claim templates and the pods of each workload.

Nodes are Node objects with a Ready status and room for every pod (no kubelet: pods bind and
never run). Device-plugin nodes advertise ``openfuyao.com/kae.<engine>`` in capacity and
allocatable, as the device plugin makes the kubelet do; DRA nodes advertise none and have the
pool our publisher builds for the 2-socket tree with 2 VFs per PF (``kunpeng920-2p-vfs``, read by
the package's discovery, built by ``kae_deviceplugin.dra.slices.build_slices``). The minimal
slice has the same devices with only ``engine`` and the standard ``numaNode`` attribute.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx2 as httpx
import yaml
from bench_fleet import inventories

from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.slice_devices import NUMA_NODE
from kae_deviceplugin.dra.slices import NodeRef, build_slices

REPO = Path(__file__).resolve().parents[1]
DEVICE_CLASSES = REPO / "deploy" / "dra" / "deviceclasses.yaml"  # rendered from the chart
NAMESPACE = "kae-sched"
NODE_PREFIX = "kae-sched-"
DEVICES_PER_ENGINE = 6  # the tree: per engine 2 PFs and 4 VFs
CONCURRENCY = 32
RESOURCE = "/apis/resource.k8s.io/v1"
ATTR = f'device.attributes["{DRIVER}"]'
Json = dict[str, Any]
T = TypeVar("T")
R = TypeVar("R")


_inventories = functools.cache(inventories)  # the fixture tree, read once


class Kube:
    """A small async client of one API server (bearer token, JSON)."""

    def __init__(self, server: str, ca: Path, token: str) -> None:
        limits = httpx.Limits(max_connections=CONCURRENCY + 8)
        self.client = httpx.AsyncClient(
            base_url=server,
            verify=str(ca),
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(60.0),
            limits=limits,
        )

    async def call(self, method: str, path: str, body: Any = None, ok: Sequence[int] = ()) -> Any:
        headers = {}
        if method == "PATCH":
            headers["Content-Type"] = "application/merge-patch+json"
        answer = await self.client.request(method, path, json=body, headers=headers)
        if answer.status_code >= 300 and answer.status_code not in ok:
            raise RuntimeError(f"{method} {path}: {answer.status_code} {answer.text[:300]}")
        return answer.json() if answer.content else None

    async def watch(self, path: str, version: str) -> AsyncIterator[Json]:
        """Watch events from ``version`` on, as they arrive."""
        params = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "false"}
        timeout = httpx.Timeout(60.0, read=None)
        async with self.client.stream("GET", path, params=params, timeout=timeout) as stream:
            async for line in stream.aiter_lines():
                if line:
                    yield json.loads(line)

    async def close(self) -> None:
        await self.client.aclose()


async def bounded(call: Callable[[T], Awaitable[R]], items: Iterable[T]) -> list[R]:
    """``call`` on every item, at most CONCURRENCY in flight."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(item: T) -> R:
        async with gate:
            return await call(item)

    return list(await asyncio.gather(*(one(i) for i in items)))


def node_name(index: int) -> str:
    return f"{NODE_PREFIX}{index + 1:04d}"


def node_resources(device_plugin: bool) -> dict[str, str]:
    room = {"cpu": "256", "memory": "1024Gi", "pods": "1000"}
    if device_plugin:
        room |= {f"openfuyao.com/kae.{e}": str(DEVICES_PER_ENGINE) for e in ("hpre", "sec", "zip")}
    return room


def node_body(name: str, device_plugin: bool) -> Json:
    room = node_resources(device_plugin)
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "synthetic"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": room, "allocatable": room, "conditions": [ready]},
    }


async def set_device_plugin(kube: Kube, names: Sequence[str], on: bool) -> None:
    """Every node's status: with the device plugin's resources, or without them."""
    room = node_resources(on)
    removed = {k: None for k in node_resources(True) if k not in room}
    body = {"status": {"capacity": room | removed, "allocatable": room | removed}}
    await bounded(lambda n: kube.call("PATCH", f"/api/v1/nodes/{n}/status", body), names)


async def create_nodes(kube: Kube, count: int, device_plugin: bool) -> list[NodeRef]:
    """Nodes with their status; the API server's admission taints a new node not-ready, and the
    node lifecycle controller, which would lift that once the node is Ready, is off here."""

    async def one(name: str) -> NodeRef:
        made = await kube.call("POST", "/api/v1/nodes", node_body(name, device_plugin))
        await kube.call("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}})
        return NodeRef(name, made["metadata"]["uid"])

    return await bounded(one, [node_name(i) for i in range(count)])


def full_slice(node: NodeRef, generation: int) -> Json:
    """The node's one slice as our publisher builds it."""
    inv = _inventories()
    plan = build_slices(inv.base, node, generation=generation, queues=inv.queues)
    assert len(plan.slices) == 1, "the 2-socket tree fits in one slice"
    return plan.slices[0]


def minimal_slice(node: NodeRef, generation: int) -> Json:
    """The same slice with only ``engine`` and ``numaNode`` per device, no capacity."""
    built = full_slice(node, generation)
    for device in built["spec"]["devices"]:
        attrs = device["attributes"]
        device["attributes"] = {k: attrs[k] for k in ("engine", NUMA_NODE)}
        device.pop("capacity", None)
    return built


def before_slice(node: NodeRef, generation: int) -> Json:
    """Our slice as published before issue 31 cut it: every device also carried its uacce name,
    the QM ``api``, the driver version, a VF's PF and its queue total, shared or not."""
    built = full_slice(node, generation)
    inv = _inventories()
    by_address = {d.pci_address: d for d in inv.base}
    for entry in built["spec"]["devices"]:
        address = entry["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
        device = by_address[address]
        before = {"uacceName": {"string": device.name}, "api": {"string": device.api or ""},
                  "driverVersion": {"version": device.driver_version or "0.0.0"}}  # fmt: skip
        if device.parent_pf is not None:
            before["physfn"] = {"string": device.parent_pf}
        entry["attributes"] = before | entry["attributes"]
        entry.setdefault("capacity", {"queues": {"value": str(inv.queues[address])}})
    return built


SLICE_KINDS: dict[str, Callable[[NodeRef, int], Json]] = {
    "full": full_slice, "minimal": minimal_slice, "before": before_slice,
}  # fmt: skip


def attribute_counts(slice_: Json) -> list[int]:
    return [len(d["attributes"]) + len(d.get("capacity", {})) for d in slice_["spec"]["devices"]]


class Slices:
    """Every node's slice, created once and then replaced with one of another kind."""

    def __init__(self, kube: Kube, nodes: Sequence[NodeRef]) -> None:
        self.kube, self.nodes = kube, list(nodes)
        self.versions: dict[str, str] = {}
        self.generation = 0
        self.kind = ""

    async def publish(self, kind: str) -> None:
        self.generation += 1
        build = SLICE_KINDS[kind]

        async def one(node: NodeRef) -> None:
            body = build(node, self.generation)
            name = body["metadata"]["name"]
            if name in self.versions:
                body["metadata"]["resourceVersion"] = self.versions[name]
                made = await self.kube.call("PUT", f"{RESOURCE}/resourceslices/{name}", body)
            else:
                made = await self.kube.call("POST", f"{RESOURCE}/resourceslices", body)
            self.versions[name] = made["metadata"]["resourceVersion"]

        await bounded(one, self.nodes)
        self.kind = kind


async def create_device_classes(kube: Kube) -> list[str]:
    """The chart's DeviceClasses, as rendered into deploy/dra/deviceclasses.yaml."""
    names = []
    for doc in yaml.safe_load_all(DEVICE_CLASSES.read_text()):
        if doc and doc.get("kind") == "DeviceClass":
            await kube.call("POST", f"{RESOURCE}/deviceclasses", doc)
            names.append(doc["metadata"]["name"])
    return names


def request(name: str, engine: str, selector: str | None = None) -> Json:
    exactly: Json = {"deviceClassName": f"{engine}.{DRIVER}"}
    if selector is not None:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": exactly}


# Claim templates, by workload: one HPRE that does RSA (by our algorithm attribute, or on the
# minimal slice by the engine, the nearest thing it has), and an HPRE with a SEC on one NUMA node.
TEMPLATES: dict[str, Json] = {
    "by-alg": {"requests": [request("hpre", "hpre", f"{ATTR}.alg_rsa")]},
    "by-engine": {"requests": [request("hpre", "hpre", f'{ATTR}.engine == "hpre"')]},
    "numa-pair": {
        "requests": [request("hpre", "hpre"), request("sec", "sec")],
        "constraints": [{"requests": ["hpre", "sec"], "matchAttribute": NUMA_NODE}],
    },
}


async def create_templates(kube: Kube) -> None:
    for name, devices in TEMPLATES.items():
        body = {"metadata": {"name": name}, "spec": {"spec": {"devices": devices}}}
        await kube.call("POST", f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaimtemplates", body)


def pod_body(name: str, template: str | None, extended: str | None) -> Json:
    container: Json = {"name": "c", "image": "kae.invalid/pause:1"}
    spec: Json = {
        "containers": [container],
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    if extended is not None:
        container["resources"] = {"limits": {extended: "1"}}
    if template is not None:
        spec["resourceClaims"] = [{"name": "kae", "resourceClaimTemplateName": template}]
        container["resources"] = {"claims": [{"name": "kae"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def prepare_namespace(kube: Kube) -> None:
    await kube.call("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    account = {"metadata": {"name": "default"}}
    await kube.call("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", account, ok=(409,))
    await create_templates(kube)
