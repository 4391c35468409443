"""One read of what the plugin's commands look at, every list at once (concurrently).

Pods are read only for what they are needed for: the counts of device-plugin nodes. A cluster
with a few such nodes lists the pods of each (``spec.nodeName``, as ``kubectl describe node``
does) rather than every pod of the cluster; with many, one list of all pods is fewer requests.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any

from kae_deviceplugin.apiserver.reads import (
    DEVICE_CLASSES,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ClusterReads,
)
from kae_deviceplugin.core.engines import DRA_DRIVER, RESOURCE_PREFIX
from kae_deviceplugin.dra.quantity import parse_whole_quantity
from kae_deviceplugin.kubectl.pool import Pool, read_pool

JsonObject = dict[str, Any]
DONE_PHASES = ("Succeeded", "Failed")
PER_NODE_LISTS = 20  # device-plugin nodes up to which pods are listed node by node


@dataclass(frozen=True)
class Cluster:
    """Nodes, the driver's slices, claims, pods and DeviceClasses, as read once."""

    nodes: list[JsonObject]
    slices: list[JsonObject]
    claims: list[JsonObject]
    pods: list[JsonObject]
    classes: list[JsonObject]

    @functools.cached_property
    def pool(self) -> Pool:
        return read_pool(self.slices, self.claims)

    @functools.cached_property
    def dra_nodes(self) -> frozenset[str]:
        """Nodes the driver published a pool for (an empty one too)."""
        return frozenset(str((s.get("spec") or {}).get("nodeName") or "") for s in self.slices)

    @functools.cached_property
    def _pods_by_node(self) -> dict[str, list[JsonObject]]:
        found: dict[str, list[JsonObject]] = {}
        for pod in self.pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and holds_node_resources(pod):
                found.setdefault(str(node), []).append(pod)
        return found

    def holding_pods(self, node: str) -> list[JsonObject]:
        """The pods bound to ``node`` that hold what they asked (not Succeeded or Failed)."""
        return self._pods_by_node.get(node, [])


async def read_cluster(reads: ClusterReads, *, pods: bool = True, classes: bool = False) -> Cluster:
    """Everything at once, then the device-plugin nodes' pods; ``pods`` and ``classes`` False
    skip those lists."""

    async def nothing() -> list[JsonObject]:
        return []

    nodes, slices, claims, device_classes = await asyncio.gather(
        reads.list_all(NODES),
        reads.list_all(RESOURCE_SLICES, {"spec.driver": DRA_DRIVER}),
        reads.list_all(RESOURCE_CLAIMS),
        reads.list_all(DEVICE_CLASSES) if classes else nothing(),
    )
    cluster = Cluster(nodes, slices, claims, [], device_classes)
    if not pods:
        return cluster
    plugin_nodes = [
        name_of(n)
        for n in nodes
        if name_of(n) not in cluster.dra_nodes and any(node_resources(n, "capacity").values())
    ]
    if len(plugin_nodes) > PER_NODE_LISTS:
        listed = await reads.list_all(PODS)
    else:
        per_node = [reads.list_all(PODS, {"spec.nodeName": n}) for n in plugin_nodes]
        listed = [pod for found in await asyncio.gather(*per_node) for pod in found]
    return Cluster(nodes, slices, claims, listed, device_classes)


def name_of(obj: JsonObject) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def namespace_of(obj: JsonObject) -> str:
    return str((obj.get("metadata") or {}).get("namespace", ""))


def whole(text: Any) -> int:
    """A quantity as a whole number; 0 for one that is not (the API never writes such)."""
    try:
        return parse_whole_quantity(text)
    except ValueError:
        return 0


def node_resources(node: JsonObject, field: str) -> dict[str, int]:
    """The node's ``status.<field>`` (capacity, allocatable) of ``openfuyao.com/kae.*``."""
    values = (node.get("status") or {}).get(field) or {}
    return {k: whole(v) for k, v in values.items() if k.startswith(RESOURCE_PREFIX)}


def _container_asks(container: JsonObject) -> dict[str, int]:
    resources = container.get("resources") or {}
    # An extended resource's request equals its limit, and either may be given alone.
    asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    return {k: whole(v) for k, v in asked.items() if k.startswith(RESOURCE_PREFIX)}


def pod_asks(pod: JsonObject) -> dict[str, int]:
    """What the pod asks of ``openfuyao.com/kae.*``: its containers' sum, or an init
    container's ask where that is larger (init containers run one at a time, before them)."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or ():
        for key, value in _container_asks(container).items():
            total[key] = total.get(key, 0) + value
    for container in spec.get("initContainers") or ():
        for key, value in _container_asks(container).items():
            total[key] = max(total.get(key, 0), value)
    return {k: v for k, v in total.items() if v > 0}


def holds_node_resources(pod: JsonObject) -> bool:
    """Whether a pod bound to a node holds what it asked (every phase but the two ends)."""
    return (pod.get("status") or {}).get("phase") not in DONE_PHASES
