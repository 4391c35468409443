"""The Prometheus exposition: valid, conventional, and equal to the node's sysfs after faults."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from kae_deviceplugin.core.health import ALL_REASONS, ENGINE_STOPPED, ISOLATED
from kae_deviceplugin.core.model import QueueBook
from kae_deviceplugin.core.views import EngineSettings, build_views
from kae_deviceplugin.counters import ALLOCATION_ERROR_CODES, Counters
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.kubelet.podresources import Allocation, Allocations
from kae_deviceplugin.observability.metrics import Snapshot, device_families, exposition
from kae_deviceplugin.testing.sysfs_builder import remove_dev_node, set_attribute
from kae_deviceplugin.testing.sysfs_layout import uacce_attributes
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.observability_harness import ObservedNode, observed_node, wait_until

FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"
TREE = "kunpeng920-2p-vfs"
RESOURCES = {f"openfuyao.com/kae.{e}" for e in ("hpre", "sec", "zip")}


def expected_devices() -> dict[str, dict[str, str]]:
    """What the tree's specs say each device is, independently of discovery."""
    return {
        spec.name: {
            "pci_address": spec.pci_address,
            "function": "vf" if spec.parent_pf else "pf",
            "numa_node": str(spec.numa_node),
            "queues": str(uacce_attributes(spec)["available_instances"]),
        }
        for spec in TREES[TREE].devices()
    }


def check_with_promtool(text: str) -> None:
    """`promtool check metrics` must print nothing and succeed (lint included)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def reasons_by_device(node: ObservedNode) -> dict[str, set[str]]:
    active: dict[str, set[str]] = {}
    for sample in node.samples("kae_device_unhealthy_reason"):
        reasons = active.setdefault(sample.labels["device"], set())
        if sample.value == 1:
            reasons.add(sample.labels["reason"])
    return active


def registered(node: ObservedNode) -> dict[str, float]:
    return {s.labels["resource"]: s.value for s in node.samples("kae_resource_registered")}


def test_scrape_of_the_two_socket_vf_tree_matches_its_specs() -> None:
    """18 devices with sysfs identity, NUMA node, PF/VF, queues; all healthy; registered."""
    expected = expected_devices()
    assert len(expected) == 18
    with observed_node(TREE) as node:
        assert node.wait_registered(3)
        info = {s.labels["device"]: s.labels for s in node.samples("kae_device_info")}
        assert set(info) == set(expected)
        for name, labels in info.items():
            want = expected[name]
            assert labels["pci_address"] == want["pci_address"]
            assert labels["function"] == want["function"]
            assert labels["numa_node"] == want["numa_node"]
            assert labels["api"] == "hisi_qm_v2"
        queues = node.by_device("kae_device_available_queues")
        assert {name: str(int(v)) for name, v in queues.items()} == {
            name: want["queues"] for name, want in expected.items()
        }
        assert set(node.by_device("kae_device_healthy").values()) == {1.0}
        assert node.samples("kae_device_unhealthy_reason") == []  # no reason holds anywhere
        assert wait_until(lambda: registered(node) == dict.fromkeys(RESOURCES, 1.0))
        check_with_promtool(node.scrape())


def test_injected_faults_show_in_the_next_scrape() -> None:
    """Isolation, a stopped engine, a lost /dev node and a queue change appear after a rescan.

    Isolating a PF isolates its VFs too: the kernel has one flag per PF, which VFs read. The
    queue change is read when scraped (the scan loop reads available_instances lazily)."""
    specs = TREES[TREE].devices()
    hpre2 = next(s.pci_address for s in specs if s.name == "hisi_hpre-2")
    isolated = {"hisi_hpre-2", *(s.name for s in specs if s.parent_pf == hpre2)}
    assert len(isolated) > 1
    with observed_node(TREE) as node:
        assert node.wait_registered(3)
        set_attribute(node.root, "hisi_hpre-2", "isolate", "1")
        set_attribute(node.root, "hisi_sec2-8", "dev_state", "-1")
        remove_dev_node(node.root, "hisi_zip-5")
        set_attribute(node.root, "hisi_zip-14", "available_instances", "7")
        node.runner.rescan()

        def faults_visible() -> bool:
            healthy = node.by_device("kae_device_healthy")
            unhealthy = {name for name, value in healthy.items() if value == 0}
            queues = node.by_device("kae_device_available_queues")
            return unhealthy == {*isolated, "hisi_sec2-8", "hisi_zip-5"} and (
                queues["hisi_zip-14"] == 7
            )

        assert wait_until(faults_visible)
        reasons = reasons_by_device(node)
        assert all(reasons[name] == {ISOLATED} for name in isolated)
        assert reasons["hisi_sec2-8"] == {ENGINE_STOPPED}
        assert reasons["hisi_zip-5"] == {"dev-node-missing"}
        assert sum(bool(r) for r in reasons.values()) == len(isolated) + 2
        assert len(node.samples("kae_device_info")) == 18  # unhealthy devices are still there
        check_with_promtool(node.scrape())

        set_attribute(node.root, "hisi_hpre-2", "isolate", "0")
        node.runner.rescan()
        assert wait_until(lambda: node.by_device("kae_device_healthy")["hisi_hpre-2"] == 1)


def registrations(node: ObservedNode) -> dict[str, float]:
    """kae_kubelet_registrations_total by resource, in a fresh scrape."""
    samples = node.samples("kae_kubelet_registrations")
    return {s.labels["resource"]: s.value for s in samples if s.name.endswith("_total")}


def counted(registered: dict[str, float]) -> bool:
    """Every resource was registered at least once."""
    return set(registered) >= RESOURCES and min(registered.values()) >= 1


def test_counters_follow_conventions_and_count_registrations() -> None:
    """Counters are exposed as *_total, the build info is there, registrations are counted."""
    with observed_node(TREE) as node:
        assert node.wait_registered(3)
        # The kubelet opens a stream before it answers Register, and a registration counts
        # once Register has returned: the streams above do not mean the count is in yet.
        assert wait_until(lambda: counted(registrations(node)))
        families = {f.name: f for f in text_string_to_metric_families(node.scrape())}
        for name in ("kae_allocations", "kae_kubelet_registrations", "kae_kubelet_restarts"):
            assert families[name].type == "counter"
            assert all(s.name.endswith(("_total", "_created")) for s in families[name].samples), (
                name
            )
        assert families["kae_grpc_request_duration_seconds"].type == "histogram"
        assert families["kae_scan_duration_seconds"].type == "histogram"
        assert families["kae_build_info"].samples[0].labels["version"]


def test_openmetrics_is_served_when_asked_for() -> None:
    """A scraper that accepts OpenMetrics gets it, with its content type and # EOF."""
    with observed_node(TREE) as node:
        status, content_type, body = node.get(
            "/metrics", accept="application/openmetrics-text; version=1.0.0"
        )
        assert status == 200
        assert content_type.startswith("application/openmetrics-text")
        text = body.decode()
        assert text.endswith("# EOF\n")
        # The OpenMetrics parser carries no annotations, unlike the text-format one.
        names = {f.name for f in openmetrics_families(text)}  # type: ignore[no-untyped-call]
        assert {"kae_device_info", "kae_device_healthy", "kae_allocations"} <= names
        status, content_type, _ = node.get("/metrics")
        assert content_type == "text/plain; version=0.0.4; charset=utf-8"


def snapshot_with(allocations: Allocations | None, shares: int = 1) -> Snapshot:
    inventory = scan(FIXTURES / TREE / "sys", FIXTURES / TREE / "dev")
    views = build_views(inventory, {"hpre": EngineSettings(shares=shares)})
    return Snapshot(inventory, views, frozenset(views), allocations)


def allocated(snapshot: Snapshot) -> dict[tuple[str, str], float]:
    families = {f.name: f for f in device_families(snapshot)}
    return {
        (s.labels["pci_address"], s.labels["pod"]): s.value
        for s in families["kae_device_allocated"].samples
    }


def test_allocated_counts_shares_per_holder_and_shows_free_devices() -> None:
    """Shares held by two pods count per pod; a free device shows once, with empty pod labels."""
    hpre = "openfuyao.com/kae.hpre"
    rows = (
        Allocation(hpre, "0000:79:00.0::0", "ns", "a", "c"),
        Allocation(hpre, "0000:79:00.0::1", "ns", "a", "c"),
        Allocation(hpre, "0000:79:00.0::2", "ns", "b", "c"),
    )
    values = allocated(snapshot_with(Allocations(rows), shares=4))
    assert values[("0000:79:00.0", "a")] == 2
    assert values[("0000:79:00.0", "b")] == 1
    assert ("0000:79:00.0", "") not in values
    assert values[("0000:b9:00.0", "")] == 0
    hpre_devices = {pci for pci, _ in values if pci.startswith(("0000:79", "0000:b9"))}
    assert len(hpre_devices) == 6
    assert len(values) == 18 + 1  # every served device once, plus the second holder


def test_unknown_holders_mean_no_allocated_series_and_pod_resources_down() -> None:
    """Without a pod-resources answer nothing is claimed about holders; up is 0."""
    families = {f.name: f for f in device_families(snapshot_with(None))}
    assert "kae_device_allocated" not in families
    assert families["kae_pod_resources_up"].samples[0].value == 0
    families = {f.name: f for f in device_families(snapshot_with(Allocations()))}
    assert families["kae_pod_resources_up"].samples[0].value == 1


def test_exposition_of_an_empty_node_is_valid() -> None:
    """No devices: still a valid exposition (no device series), fit for promtool."""
    empty = Snapshot(scan(Path("/nonexistent"), Path("/nonexistent")), {}, frozenset(), None)
    body, content_type = exposition(empty, Counters())
    assert content_type.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert families["kae_device_info"].samples == []
    check_with_promtool(body.decode())


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not installed (Debian package prometheus); the lint did not run",
)
@pytest.mark.parametrize("tree", [TREE, "faults", "empty-node"])
def test_promtool_finds_nothing_to_complain_about(tree: str) -> None:
    """`promtool check metrics` is clean on a live scrape, odd devices and empty nodes included."""
    with observed_node(tree) as node:
        assert wait_until(lambda: node.samples("kae_pod_resources_up"))
        check_with_promtool(node.scrape())


def series_by_family(snapshot: Snapshot) -> dict[str, int]:
    body, _ = exposition(snapshot, Counters())
    return {f.name: len(f.samples) for f in text_string_to_metric_families(body.decode())}


def split_series(tree: str) -> tuple[int, int, int]:
    """Devices of ``tree`` (all free), its per-device series and the rest, in one exposition."""
    inventory = scan(FIXTURES / tree / "sys", FIXTURES / tree / "dev")
    views = build_views(inventory, {})
    totals = QueueBook({d.pci_address: 256 for d in inventory})  # as the front ends book them
    counts = series_by_family(Snapshot(inventory, views, frozenset(views), Allocations(), totals))
    per_device = sum(n for name, n in counts.items() if name.startswith("kae_device_"))
    return len(inventory), per_device, sum(counts.values()) - per_device


def test_series_budget_is_a_few_per_device_plus_a_fixed_few_dozen() -> None:
    """Healthy, free devices: 6 series each; the rest is the same few dozen for 6 or 18 devices."""
    devices, per_device, fixed = split_series(TREE)
    assert devices == 18
    # info, healthy, free queues, allocated, queues in use, queues granted (reasons: none
    # holds; holders: none while free)
    assert per_device == 6 * devices
    assert fixed <= 80
    small_devices, small_per_device, small_fixed = split_series("kunpeng920-2p")
    assert (small_devices, small_per_device, small_fixed) == (6, 6 * 6, fixed)


def test_reason_series_exist_only_while_the_reason_holds() -> None:
    """The faults tree: one reason series per held reason, none for healthy devices."""
    inventory = scan(FIXTURES / "faults" / "sys", FIXTURES / "faults" / "dev")
    families = {f.name: f for f in device_families(Snapshot(inventory, {}, frozenset(), None))}
    held = {
        (s.labels["device"], s.labels["reason"])
        for s in families["kae_device_unhealthy_reason"].samples
    }
    assert held == {(d.name, r) for d in inventory for r in d.reasons}
    assert all(s.value == 1 for s in families["kae_device_unhealthy_reason"].samples)
    assert {r for _, r in held} <= set(ALL_REASONS)
    assert "hisi_zip-5" not in {d for d, _ in held}  # the one healthy device


def test_labelled_counters_exist_at_zero_for_every_enabled_resource() -> None:
    """Before any Allocate: allocations and each error code per resource at 0, no _created."""
    snapshot = snapshot_with(Allocations())
    body, _ = exposition(snapshot, Counters())
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    errors = {
        (s.labels["resource"], s.labels["code"]): s.value
        for s in families["kae_allocation_errors"].samples
    }
    for resource in snapshot.views:
        assert all(errors[(resource, code)] >= 0 for code in ALLOCATION_ERROR_CODES)
    assert {s.labels["resource"] for s in families["kae_allocations"].samples} >= set(
        snapshot.views
    )
    assert {s.labels["resource"] for s in families["kae_kubelet_registrations"].samples} >= set(
        snapshot.views
    )
    assert not any(s.name.endswith("_created") for f in families.values() for s in f.samples)


def test_driver_info_names_each_engine_driver_and_version() -> None:
    """One kae_driver_info per engine: version where the module has one, else "unknown"."""

    def drivers(tree: str) -> set[tuple[str, str, str]]:
        inventory = scan(FIXTURES / tree / "sys", FIXTURES / tree / "dev")
        families = {f.name: f for f in device_families(Snapshot(inventory, {}, frozenset(), None))}
        return {
            (s.labels["engine"], s.labels["driver"], s.labels["version"])
            for s in families["kae_driver_info"].samples
        }

    assert drivers("kunpeng920-2p") == {
        ("hpre", "hisi_hpre", "2.0.2"),
        ("sec", "hisi_sec2", "2.0.2"),
        ("zip", "hisi_zip", "2.0.2"),
    }
    assert ("zip", "hisi_zip", "unknown") in drivers("faults")
    assert drivers("empty-node") == set()
