"""The node's KAE facts as metrics (issue 37): the families, and the real daemon's scrape."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kae_deviceplugin.counters import Counters
from kae_deviceplugin.discovery.node_facts import read_node_facts
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.observability.metrics import Snapshot, exposition
from tests.observability.test_metrics import check_with_promtool
from tests.support.fact_trees import FACT_TREES
from tests.support.node_files import KIB_PER_MIB, NodeSpec, set_meminfo
from tests.support.observability_harness import observed_node, wait_until

MIB = 1024 * 1024
FACT_FAMILIES = (
    "kae_node_info",
    "kae_driver_module_info",
    "kae_devices_without_sva",
    "kae_cma_total_bytes",
    "kae_cma_free_bytes",
    "kae_engine_absent",
)


def fact_samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        if family.name in FACT_FAMILIES:
            found[family.name] = [(dict(s.labels), s.value) for s in family.samples]
    return found


def scrape_of(root: Path) -> str:
    """The exposition of a snapshot of the tree at ``root`` with its facts."""
    inventory = scan(root / "sys", root / "dev")
    snapshot = Snapshot(
        inventory, {}, frozenset(), None, node_facts=read_node_facts(root / "sys", inventory)
    )
    body, _ = exposition(snapshot, Counters())
    return body.decode()


def test_a_node_without_sva_shows_its_cma_and_modules(tmp_path: Path) -> None:
    """SMMU off, 8 MiB CMA free: node info, the modules' provenance and mode, devices without
    SVA per engine and both CMA figures; the exposition passes promtool."""
    FACT_TREES["no-sva-low-cma"](tmp_path)
    text = scrape_of(tmp_path)
    check_with_promtool(text)
    found = fact_samples(text)
    assert found["kae_node_info"] == [({"cpu": "HiSilicon Kunpeng 920", "sva": "false"}, 1.0)]
    assert ({"engine": "sec", "module": "hisi_sec2", "provenance": "out-of-tree",
             "version": "2.0.2", "uacce_mode": "2", "pf_q_num": "256"}, 1.0) in found[
        "kae_driver_module_info"
    ]  # fmt: skip
    assert found["kae_devices_without_sva"] == [
        ({"engine": e}, 1.0) for e in ("hpre", "sec", "zip")
    ]
    assert found["kae_cma_total_bytes"] == [({}, 64.0 * MIB)]
    assert found["kae_cma_free_bytes"] == [({}, 8.0 * MIB)]
    assert found["kae_engine_absent"] == []


def test_sva_nodes_show_no_cma_and_absent_engines_their_cause(tmp_path: Path) -> None:
    """Devices with SVA: no CMA series; the ZIP PFs without their driver: one absent series."""
    FACT_TREES["engine-without-driver"](tmp_path)
    found = fact_samples(scrape_of(tmp_path))
    assert "kae_cma_free_bytes" not in found
    assert found["kae_engine_absent"] == [
        ({"engine": "zip", "likely_cause": "driver-not-loaded"}, 1.0)
    ]
    assert found["kae_node_info"] == [({"cpu": "HiSilicon Kunpeng 920", "sva": "true"}, 1.0)]


def test_the_daemon_reads_cma_free_at_each_scrape() -> None:
    """The real daemon's /metrics: CmaFree as meminfo says it now, changed between scrapes."""
    with observed_node(build=FACT_TREES["no-sva-low-cma"]) as node:
        assert wait_until(lambda: node.samples("kae_cma_free_bytes")), node.scrape()
        assert node.samples("kae_cma_free_bytes")[0].value == 8 * MIB
        set_meminfo(node.root, NodeSpec(cma_total_kib=64 * KIB_PER_MIB, cma_free_kib=KIB_PER_MIB))
        assert node.samples("kae_cma_free_bytes")[0].value == 1 * MIB
        (info,) = node.samples("kae_node_info")
        assert info.labels == {"cpu": "HiSilicon Kunpeng 920", "sva": "false"}
