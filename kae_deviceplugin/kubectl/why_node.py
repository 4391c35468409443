"""What keeps a pod off a node before any device is looked at (pure): the node cordoned, a
taint the pod does not tolerate, its nodeSelector, its required node affinity. The basics of
the scheduler's node filters, not all of them (no pod affinity, ports or volumes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kae_deviceplugin.kubectl.cluster import name_of
from kae_deviceplugin.kubectl.pool import Taint
from kae_deviceplugin.kubectl.why_request import BLOCKING_EFFECTS, tolerated

JsonObject = dict[str, Any]
OPT_OUT_LABEL = "openfuyao.com/kae.deploy.device-plugin"
UNSCHEDULABLE = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def labels_of(node: JsonObject) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def _compare(operator: str, have: str | None, wanted: list[str]) -> bool:
    """Gt and Lt: both sides whole numbers, else the expression does not hold."""
    try:
        mine, theirs = int(have or ""), int(wanted[0] if wanted else "")
    except ValueError:
        return False
    return mine > theirs if operator == "Gt" else mine < theirs


def _expression_holds(expression: JsonObject, values: dict[str, str]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator", "")
    wanted = [str(v) for v in expression.get("values") or ()]
    have = values.get(key)
    checks = {
        "In": lambda: have in wanted,
        "NotIn": lambda: have not in wanted,
        "Exists": lambda: have is not None,
        "DoesNotExist": lambda: have is None,
        "Gt": lambda: _compare("Gt", have, wanted),
        "Lt": lambda: _compare("Lt", have, wanted),
    }
    check = checks.get(operator)
    return check is not None and check()


def _term_holds(term: JsonObject, node: JsonObject) -> bool:
    labels, fields = labels_of(node), {"metadata.name": name_of(node)}
    return all(_expression_holds(e, labels) for e in term.get("matchExpressions") or ()) and all(
        _expression_holds(e, fields) for e in term.get("matchFields") or ()
    )


def _taint_lines(pod_spec: JsonObject, node: JsonObject) -> list[str]:
    tolerations: Sequence[JsonObject] = pod_spec.get("tolerations") or ()
    lines = []
    if (node.get("spec") or {}).get("unschedulable") and not tolerated(UNSCHEDULABLE, tolerations):
        lines.append("the node is cordoned (unschedulable)")
    for raw in (node.get("spec") or {}).get("taints") or ():
        taint = Taint(str(raw.get("key", "")), str(raw.get("value", "")), str(raw.get("effect")))
        if taint.effect in BLOCKING_EFFECTS and not tolerated(taint, tolerations):
            lines.append(f"the node is tainted {taint} and the pod does not tolerate it")
    return lines


def node_lines(pod: JsonObject, node: JsonObject) -> list[str]:
    """Why ``pod`` cannot go to ``node`` whatever devices it has; empty: nothing here."""
    spec = pod.get("spec") or {}
    lines = _taint_lines(spec, node)
    labels = labels_of(node)
    for key, value in sorted((spec.get("nodeSelector") or {}).items()):
        if labels.get(key) != value:
            lines.append(f"nodeSelector {key}={value}: the node has {labels.get(key, '<none>')}")
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or ()
    if terms and not any(_term_holds(term, node) for term in terms):
        lines.append("required node affinity: no nodeSelectorTerm matches the node")
    return lines


def opted_out(node: JsonObject) -> bool:
    """The chart's opt-out label: no KAE pod of the chart runs on the node."""
    return labels_of(node).get(OPT_OUT_LABEL) == "false"
