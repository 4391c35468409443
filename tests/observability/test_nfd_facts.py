"""The node's KAE facts as NFD labels (issue 37): from the facts, and through the real daemon."""

from __future__ import annotations

from pathlib import Path

from kae_deviceplugin.daemon.run import build_daemon
from kae_deviceplugin.discovery.node_facts import read_node_facts
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.observability.nfd import (
    LABEL_PREFIX,
    feature_labels,
    nfd_task,
    parse,
    valid_label_part,
)
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_builder import add_device, set_driver_bound
from kae_deviceplugin.testing.sysfs_trees import kunpeng_pf
from tests.support.fact_trees import FACT_TREES
from tests.support.harness import DaemonThread, settings_for, short_tmpdir
from tests.support.node_files import KIB_PER_MIB, NodeSpec, set_meminfo
from tests.support.observability_harness import wait_until

P = LABEL_PREFIX
FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"


def labels_of(root: Path) -> dict[str, str]:
    inventory = scan(root / "sys", root / "dev")
    return feature_labels(inventory, read_node_facts(root / "sys", inventory))


def fact_labels(labels: dict[str, str]) -> dict[str, str]:
    """The labels the facts add (the inventory's own are test_nfd.py's)."""
    keys = (".sva", ".uacce-mode", ".pf-q-num", ".driver-provenance", "cause", "cma-")
    return {k.removeprefix(P): v for k, v in labels.items() if any(s in k for s in keys)}


def test_a_node_without_sva_is_labelled_with_its_mode_and_cma(tmp_path: Path) -> None:
    """SMMU off: per engine sva=false, uacce-mode=2, pf-q-num, out-of-tree; CMA total in MiB."""
    FACT_TREES["no-sva-low-cma"](tmp_path)
    expected = {"kae.cma-total-mib": "64"}
    for engine in ("hpre", "sec", "zip"):
        expected |= {
            f"kae-{engine}.sva": "false",
            f"kae-{engine}.uacce-mode": "2",
            f"kae-{engine}.pf-q-num": "256",
            f"kae-{engine}.driver-provenance": "out-of-tree",
        }
    labels = labels_of(tmp_path)
    assert fact_labels(labels) == expected
    assert all(
        valid_label_part(k.removeprefix(P)) and valid_label_part(v) for k, v in labels.items()
    )


def test_sva_nodes_carry_no_cma_label_and_in_tree_drivers_say_so() -> None:
    """Mainline 6.6 (in-tree drivers, SVA): sva=true, provenance in-tree, no CMA label."""
    labels = fact_labels(labels_of(FIXTURES / "mainline-6.6"))
    assert labels["kae-sec.sva"] == "true" and labels["kae-sec.driver-provenance"] == "in-tree"
    assert "kae.cma-total-mib" not in labels


def test_absent_engines_carry_their_likely_cause(tmp_path: Path) -> None:
    """SEC on a single-socket Kunpeng: tee-holds-sec; ZIP on the bus without its module:
    driver-not-loaded; no engine at all: no-licence for each."""
    cases = {
        "single-socket-without-sec": {"kae-sec.likely-absent-cause": "tee-holds-sec"},
        "engine-without-driver": {"kae-zip.likely-absent-cause": "driver-not-loaded"},
        "no-licence": {
            f"kae-{e}.likely-absent-cause": "no-licence" for e in ("hpre", "sec", "zip")
        },
    }
    for name, expected in cases.items():
        FACT_TREES[name](tmp_path / name)
        labels = fact_labels(labels_of(tmp_path / name))
        assert {k: v for k, v in labels.items() if "cause" in k} == expected, name


def test_the_daemon_writes_the_facts_and_follows_a_bound_driver() -> None:
    """The real daemon on a node whose ZIP PFs have no driver: the feature file carries the
    facts and the ZIP's likely cause; once hisi_zip is loaded and bound (a uacce device
    appears) the cause goes and the ZIP's own labels come."""
    with short_tmpdir() as workdir:
        node = workdir / "node"
        FACT_TREES["engine-without-driver"](node)
        set_meminfo(node, NodeSpec(cma_total_kib=128 * KIB_PER_MIB))
        features = workdir / "features.d" / "kae"
        features.parent.mkdir()
        settings = settings_for(workdir, nfd_features_file=features, scan_interval=0.1)
        assert settings.sysfs_root == node / "sys"
        cause = P + "kae-zip.likely-absent-cause"
        with KubeletEmulator(settings.effective_device_plugin_dir):
            runner = DaemonThread(
                build_daemon(
                    settings, extra_tasks=[lambda d: nfd_task(d.scan)], with_optional=False
                )
            )
            runner.start()
            try:
                assert wait_until(lambda: features.exists() and parse(features.read_text())[0])
                labels = parse(features.read_text())[0]
                assert labels[cause] == "driver-not-loaded"
                assert labels[P + "kae-sec.sva"] == "true"
                assert labels[P + "kae-hpre.driver-provenance"] == "out-of-tree"
                add_zip_devices(node)
                assert wait_until(lambda: P + "kae-zip.present" in parse(features.read_text())[0])
                labels = parse(features.read_text())[0]
                assert cause not in labels and labels[P + "kae-zip.uacce-mode"] == "1"
            finally:
                assert runner.stop() == 0


def add_zip_devices(node: Path) -> None:
    """hisi_zip loaded and bound to both ZIP PFs: their uacce devices appear."""
    for ident, socket in ((6, 0), (7, 1)):
        spec = kunpeng_pf("hisi_zip", socket, ident)
        add_device(node, spec)
        set_driver_bound(node, spec.pci_address, True, "hisi_zip")
