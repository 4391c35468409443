"""The VF profiles' metrics: VFs desired and present per PF, and each change that waits and why.

Kept apart from the device metrics (:mod:`kae_deviceplugin.observability.metrics`), which only
add these families. Series exist only for engines with a profile (``engines.<name>.vfs``); the
``reason`` label is one of the closed set in :mod:`kae_deviceplugin.core.vf_plan`, and holders are
never labels (pods come and go): the log and ``doctor`` name them.
"""

from __future__ import annotations

from collections.abc import Sequence

from kae_deviceplugin.core.vf_plan import VfChange
from kae_deviceplugin.prometheus_lite import GaugeMetricFamily, Metric

VF_LABELS = ("engine", "pf")


def vf_families(changes: Sequence[VfChange]) -> list[Metric]:
    """``kae_vfs_desired``, ``kae_vfs_present`` and ``kae_vf_change_pending`` of the last plan."""
    desired = GaugeMetricFamily(
        "kae_vfs_desired",
        "VFs the engine's profile (engines.<name>.vfs) asks of the PF.",
        labels=list(VF_LABELS),
    )
    present = GaugeMetricFamily("kae_vfs_present", "VFs the PF has now.", labels=list(VF_LABELS))
    pending = GaugeMetricFamily(
        "kae_vf_change_pending",
        "1 while the PF's VFs differ from its profile and cannot change now, by why: held-by-pod, "
        "queues-open, holders-unknown, write-failed (waiting), or no-engine, no-pf, no-sriov, "
        "above-total (refused: the profile cannot work on this node; pf is empty where there is "
        "none). Absent once the PF has its profile.",
        labels=[*VF_LABELS, "reason"],
    )
    for change in changes:
        labels = [change.engine, change.pf]
        if change.desired is not None:
            desired.add_metric(labels, change.desired)
        if change.pf:
            present.add_metric(labels, change.present)
        if change.state in ("pending", "refused"):
            pending.add_metric([*labels, change.reason], 1)
    return [desired, present, pending]
