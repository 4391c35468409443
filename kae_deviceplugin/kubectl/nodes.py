"""``kubectl kae nodes``: per node and engine, total, healthy, allocated and free (pure).

A node is in DRA mode when the driver published a pool for it (an empty pool too: the driver
runs there), else in device-plugin mode when its capacity names an ``openfuyao.com/kae.*``
resource above zero; other nodes have no KAE devices and are not listed.

* DRA: total is the published devices (an unhealthy one left out with ``unhealthyTaintEffect:
  omit`` is not counted), healthy those without the unhealthy taint, allocated those an
  allocated claim or a device-plugin pod (the held taint) holds, free the healthy ones nobody
  holds. A shared device with any claim on it counts as allocated.
* Device plugin: total is the capacity, healthy the allocatable (the kubelet counts healthy
  devices there), allocated what the node's running pods ask, free healthy minus allocated.
  With ``shares`` above 1 these count the kubelet's devices, i.e. shares.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from kae_deviceplugin.core.engines import RESOURCE_PREFIX
from kae_deviceplugin.kubectl.cluster import (
    Cluster,
    JsonObject,
    name_of,
    node_resources,
    pod_asks,
)
from kae_deviceplugin.kubectl.pool import Pool, PoolDevice

DRA, DEVICE_PLUGIN = "dra", "device-plugin"
# What a daemon in mode auto writes on its Node: the reason of its choice, "<code>: <detail>".
REASON_ANNOTATION = "openfuyao.com/kae.mode-reason"


@dataclass
class EngineCount:
    total: int = 0
    healthy: int = 0
    allocated: int = 0
    free: int = 0


@dataclass
class NodeSummary:
    node: str
    mode: str
    engines: dict[str, EngineCount] = field(default_factory=dict)
    reason: str = ""  # mode auto's reason code on the Node ("" where no daemon chose)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _dra_node(name: str, devices: Iterable[PoolDevice], pool: Pool) -> NodeSummary:
    summary = NodeSummary(name, DRA)
    for device in devices:
        count = summary.engines.setdefault(device.engine, EngineCount())
        healthy = not device.reasons
        held = bool(pool.holds_of(device)) or device.held_by is not None
        count.total += 1
        count.healthy += healthy
        count.allocated += held
        count.free += healthy and not held
    return summary


def _plugin_node(node: JsonObject, pods: Iterable[JsonObject]) -> NodeSummary | None:
    """``node``'s counts from its capacity and allocatable, and ``pods`` (those holding what
    they asked on it); None without an ``openfuyao.com/kae.*`` capacity above zero."""
    capacity = node_resources(node, "capacity")
    if not any(capacity.values()):
        return None
    allocatable = node_resources(node, "allocatable")
    summary = NodeSummary(name_of(node), DEVICE_PLUGIN)
    asked: dict[str, int] = {}
    for pod in pods:
        for resource, count in pod_asks(pod).items():
            asked[resource] = asked.get(resource, 0) + count
    for resource, total in sorted(capacity.items()):
        healthy = allocatable.get(resource, 0)
        allocated = asked.get(resource, 0)
        summary.engines[resource.removeprefix(RESOURCE_PREFIX)] = EngineCount(
            total, healthy, allocated, max(0, healthy - allocated)
        )
    return summary


def node_mode(cluster: Cluster, node: str) -> str | None:
    """``dra``, ``device-plugin`` or None (no KAE devices), as ``nodes`` decides it."""
    if node in cluster.dra_nodes:
        return DRA
    found = next((n for n in cluster.nodes if name_of(n) == node), None)
    if found is not None and any(node_resources(found, "capacity").values()):
        return DEVICE_PLUGIN
    return None


def auto_reason(node: JsonObject) -> str:
    """The reason code mode auto wrote on ``node`` (``cdi-off``), "" where none did."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(REASON_ANNOTATION, "")).partition(":")[0].strip()


def summarize(cluster: Cluster) -> list[NodeSummary]:
    """One summary per node with KAE devices, by node name."""
    pool = cluster.pool
    summaries = [_dra_node(name, pool.on(name), pool) for name in cluster.dra_nodes if name]
    for node in cluster.nodes:
        if name_of(node) in cluster.dra_nodes:
            continue
        if found := _plugin_node(node, cluster.holding_pods(name_of(node))):
            summaries.append(found)
    reasons = {name_of(node): auto_reason(node) for node in cluster.nodes}
    for summary in summaries:
        summary.reason = reasons.get(summary.node, "")
    return sorted(summaries, key=lambda s: s.node)
