"""The VF profiles' metrics: desired and present VFs per PF, and each waiting or refused change
with its reason; valid exposition (promtool where installed), no series without a profile."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.core.vf_plan import PfSriov, plan
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.observability.metrics import Snapshot, exposition
from tests.observability.test_metrics import check_with_promtool

SEC0, SEC1 = "0000:76:00.0", "0000:b6:00.0"
VFS0 = ("0000:76:00.1", "0000:76:00.2")


def scrape(snapshot: Snapshot) -> dict[str, list[tuple[dict[str, str], float]]]:
    body, _ = exposition(snapshot, Counters())
    text = body.decode()
    check_with_promtool(text)
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }


def test_desired_present_and_pending_with_reasons() -> None:
    """sec: 4 and zip: 2 on a node with two SEC PFs (one holding a pod's VF) and no ZIP: the
    first SEC PF waits (held-by-pod), the second is ready, zip is refused (no-engine)."""
    pfs = [
        PfSriov(SEC0, "sec", 63, 2, VFS0, 256),
        PfSriov(SEC1, "sec", 63, 0, (), 256),
    ]
    changes = plan(
        {"sec": 4, "zip": 2},
        pfs,
        {"sec"},
        {VFS0[0]: 384, VFS0[1]: 384},
        {VFS0[1]: ("pod default/app",)},
    )
    families = scrape(Snapshot(Inventory(), {}, frozenset(), None, vf_changes=changes))
    assert sorted((s[0]["pf"], s[1]) for s in families["kae_vfs_desired"]) == [
        (SEC0, 4),
        (SEC1, 4),
    ]
    assert sorted((s[0]["pf"], s[1]) for s in families["kae_vfs_present"]) == [
        (SEC0, 2),
        (SEC1, 0),
    ]
    assert sorted(
        (s[0]["engine"], s[0]["pf"], s[0]["reason"]) for s in families["kae_vf_change_pending"]
    ) == [("sec", SEC0, "held-by-pod"), ("zip", "", "no-engine")]


def test_no_profile_no_series() -> None:
    """Without a profile the families are empty: a default node's scrape gains no series."""
    families = scrape(Snapshot(Inventory(), {}, frozenset(), None))
    assert families.get("kae_vfs_desired", []) == []
    assert families.get("kae_vf_change_pending", []) == []
