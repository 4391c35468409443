"""``kubectl kae why pod/NAME``: per node and per request, why a pod's KAE devices cannot be
placed, or what a placed pod holds (pure but for ``explain``, which reads).

Nodes are judged one by one as the scheduler filters them: the node-level basics
(``why_node``), then each claim (``why_claim``), then each ``openfuyao.com/kae.*`` limit, served
by the device plugin where the node's allocatable has it, else by the DeviceClass whose
``extendedResourceName`` names it (a claim of ``count`` devices of that class). Nodes without
KAE devices are listed in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kae_deviceplugin.apiserver.reads import PODS, ClusterReads
from kae_deviceplugin.core.engines import RESOURCE_PREFIX
from kae_deviceplugin.kubectl.cel import Selectors
from kae_deviceplugin.kubectl.cluster import (
    Cluster,
    name_of,
    node_resources,
    pod_asks,
    read_cluster,
)
from kae_deviceplugin.kubectl.nodes import DEVICE_PLUGIN, node_mode
from kae_deviceplugin.kubectl.pool import PoolDevice
from kae_deviceplugin.kubectl.why_asks import claim_asks, class_for, extended_claim
from kae_deviceplugin.kubectl.why_claim import ClaimAsk, ClaimResult, claim_result
from kae_deviceplugin.kubectl.why_holds import hold_text, holds_of
from kae_deviceplugin.kubectl.why_node import OPT_OUT_LABEL, node_lines, opted_out
from kae_deviceplugin.kubectl.why_request import Context

JsonObject = dict[str, Any]
NO_DEVICES = "no KAE devices"


@dataclass
class NodeVerdict:
    node: str
    mode: str | None
    fits: bool
    reasons: list[str] = field(default_factory=list)


@dataclass
class Explanation:
    """What ``why`` found; ``as_json`` is the ``-o json`` document."""

    pod: str
    phase: str
    node: str | None
    asks: list[str]
    summary: str
    holds: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[NodeVerdict] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod, "phase": self.phase, "node": self.node, "asks": self.asks,
            "summary": self.summary, "holds": self.holds,
            "nodes": [n.__dict__ for n in self.nodes],
        }  # fmt: skip


def _claim_lines(result: ClaimResult) -> list[str]:
    """Nothing for a claim that fits; else every request's steps (a request met alone says
    which devices it had, which is what a failed constraint was judged on), then the claim's."""
    if result.ok:
        return []
    lines = [f"request {r.name}: {line}" for r in result.requests for line in r.lines]
    return lines + [f"{result.ask.source}: {line}" for line in result.lines]


def _limit_lines(
    resource: str, count: int, node: JsonObject, cluster: Cluster, context: Context
) -> list[str]:
    """Why the node cannot give ``count`` of an extended resource; empty: it can."""
    name = name_of(node)
    allocatable = node_resources(node, "allocatable").get(resource, 0)
    if allocatable > 0:  # the device plugin serves it here (the scheduler's rule)
        used = sum(pod_asks(p).get(resource, 0) for p in cluster.holding_pods(name))
        if count <= allocatable - used:
            return []
        free = max(allocatable - used, 0)
        return [f"{resource}: asks {count}, allocatable {allocatable}, {used} held, {free} free"]
    device_class = class_for(resource, cluster)
    if device_class is None:
        return [f"{resource}: not advertised here, no DeviceClass has it as extendedResourceName"]
    request = {"name": resource.removeprefix(RESOURCE_PREFIX),
               "exactly": {"deviceClassName": device_class, "count": count}}  # fmt: skip
    ask = ClaimAsk(resource, f"extended resource {resource}", {"requests": [request]})
    return _claim_lines(claim_result(ask, name, context.pool.on(name), context))


def judge_node(
    pod: JsonObject, node: JsonObject, asks: list[ClaimAsk], cluster: Cluster, context: Context
) -> NodeVerdict:
    """Every reason ``pod`` cannot go to ``node``; none: its KAE devices fit there."""
    name = name_of(node)
    mode = node_mode(cluster, name)
    reasons = node_lines(pod, node)
    devices: list[PoolDevice] = context.pool.on(name)
    if asks and mode == DEVICE_PLUGIN:
        reasons.append("device-plugin node: ResourceClaims are allocated on DRA nodes only")
    for ask in asks if mode != DEVICE_PLUGIN else ():
        reasons += _claim_lines(claim_result(ask, name, devices, context))
    for resource, count in sorted(pod_asks(pod).items()):
        reasons += _limit_lines(resource, count, node, cluster, context)
    return NodeVerdict(name, mode, not reasons, reasons)


def _pending_summary(pod_name: str, verdicts: list[NodeVerdict]) -> str:
    fitting = [v.node for v in verdicts if v.fits]
    if not fitting:
        return f"pod {pod_name} is not placed: no node can give it its KAE devices"
    return (
        f"pod {pod_name} is not placed, though its KAE devices fit on {', '.join(fitting)}: "
        "something else keeps it off them (kubectl describe pod)"
    )


def explain_pod(pod: JsonObject, asks: list[ClaimAsk], cluster: Cluster) -> Explanation:
    """The explanation for ``pod``, whose claims are ``asks``, in ``cluster``."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    pod_name = f"{meta.get('namespace')}/{meta.get('name')}"
    phase, node = str(status.get("phase", "")), (pod.get("spec") or {}).get("nodeName")
    asked = [a.source for a in asks] + [f"{r}: {n}" for r, n in sorted(pod_asks(pod).items())]
    result = Explanation(pod_name, phase, node, asked, "")
    if not asked:
        result.summary = f"pod {pod_name} asks for no KAE devices"
        return result
    if node:
        result.holds = holds_of(pod, node, asks, extended_claim(pod, cluster), cluster.pool)
        state = "runs" if phase == "Running" else f"is placed ({phase or 'no phase'})"
        result.summary = f"pod {pod_name} {state} on {node}"
        return result
    classes = {name_of(c): c for c in cluster.classes}
    own = frozenset(str((a.claim or {}).get("metadata", {}).get("uid")) for a in asks if a.claim)
    context = Context(classes, cluster.pool, Selectors(), own)
    for candidate in sorted(cluster.nodes, key=name_of):
        if node_mode(cluster, name_of(candidate)) is not None:
            result.nodes.append(judge_node(pod, candidate, asks, cluster, context))
            continue
        reasons = [NO_DEVICES] + (
            [f"opted out: {OPT_OUT_LABEL}=false"] if opted_out(candidate) else []
        )
        result.nodes.append(NodeVerdict(name_of(candidate), None, False, reasons))
    result.summary = _pending_summary(pod_name, result.nodes)
    return result


async def explain(reads: ClusterReads, namespace: str, name: str) -> Explanation:
    """Read the pod and the cluster, then explain."""
    pod = await reads.get(PODS, name, namespace)
    cluster = await read_cluster(reads, classes=True)
    asks = await claim_asks(reads, pod, cluster)
    return explain_pod(pod, asks, cluster)


def explanation_text(found: Explanation) -> str:
    """The table form: the summary, what it holds, then each node and its reasons."""
    lines = [found.summary]
    lines += [f"  asks {a}" for a in found.asks]
    lines += [f"  holds {hold_text(h)}" for h in found.holds]
    bare = []
    for verdict in found.nodes:
        if verdict.mode is None:  # no KAE devices: one line for all of them
            bare.append(" ".join([verdict.node, *[f"({r})" for r in verdict.reasons[1:]]]))
            continue
        head = f"node {verdict.node} ({verdict.mode}): "
        lines.append(head + ("its KAE devices fit" if verdict.fits else "cannot place it"))
        lines += [f"  {reason}" for reason in verdict.reasons]
    if bare:
        lines.append(f"nodes with {NO_DEVICES}: {', '.join(bare)}")
    return "\n".join(lines) + "\n"
