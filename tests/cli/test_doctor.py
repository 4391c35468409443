"""`kae-deviceplugin doctor` on the fixture trees and against a running daemon."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from kae_deviceplugin.cli.main import main
from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.health import ALL_REASONS, REASON_FIXES
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.observability.nfd import FeatureFile, feature_labels
from kae_deviceplugin.testing.podresources_emulator import PodResourcesEmulator
from kae_deviceplugin.testing.sysfs_builder import set_driver_bound
from kae_deviceplugin.testing.sysfs_trees import KUNPENG920_PFS
from tests.support.node_cases import CASES
from tests.support.observability_harness import observed_node

FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"


def doctor(tree: str, *extra: str) -> tuple[int, dict[str, Any]]:
    """Exit code and JSON report of doctor on a fixture tree (no daemon asked unless given)."""
    args = ["doctor", "-o", "json", "--sysfs-root", str(FIXTURES / tree / "sys")]
    args += ["--dev-root", str(FIXTURES / tree / "dev"), "--nfd-features-file", ""]
    result = CliRunner().invoke(main, [*args, "--metrics-address", "", *extra])
    report: dict[str, Any] = json.loads(result.stdout)
    return result.exit_code, report


def by_check(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {}
    for row in report["checks"]:
        rows.setdefault(row["check"], []).append(row)
    return rows


def test_every_reason_code_has_a_fix() -> None:
    """The fix table sits beside the reason codes and covers each of them."""
    assert set(REASON_FIXES) == set(ALL_REASONS)
    assert all(fix.strip() for fix in REASON_FIXES.values())


def test_faults_tree_names_each_unhealthy_device_with_the_fix_per_reason(tmp_path: Path) -> None:
    """Each Unhealthy device fails with its reasons and one fix per reason; skipped entries warn."""
    code, report = doctor("faults", "--kubelet-root", str(tmp_path))
    assert code == 1 and report["ok"] is False
    rows = by_check(report)
    inventory = scan(FIXTURES / "faults" / "sys", FIXTURES / "faults" / "dev")
    for device in inventory:
        (row,) = rows[f"device {device.name}"]
        if device.healthy:
            assert row["status"] == "ok"
            continue
        assert row["status"] == "fail"
        assert all(reason in row["detail"] for reason in device.reasons)
        assert row["fixes"] == [f"{r}: {REASON_FIXES[r]}" for r in device.reasons]
    assert "hisi_zip unknown" in rows["device hisi_zip-5"][0]["detail"]  # no version file
    assert "hisi_hpre 2.0.2" in rows["device hisi_hpre-2"][0]["detail"]
    warned = [r["detail"] for r in rows["uacce class"] if r["status"] == "warn"]
    assert len(warned) == len(inventory.warnings) == 3
    assert (
        rows["/dev nodes"][0]["status"] == "fail"
        and "hisi_zip-4" in rows["/dev nodes"][0]["detail"]
    )


def test_empty_node_fails_at_the_hardware_and_suggests_no_driver(tmp_path: Path) -> None:
    """No KAE function on the bus: doctor says so once, and suggests no modprobe or lspci."""
    code, report = doctor("empty-node", "--kubelet-root", str(tmp_path))
    assert code == 1
    rows = by_check(report)
    assert rows["hardware"][0]["status"] == "fail"
    assert "no KAE hardware on this node" in rows["hardware"][0]["detail"]
    assert rows["uacce class"][0]["status"] == "skip"
    assert rows["/dev nodes"][0]["status"] == "skip"
    assert rows["kubelet"][0]["status"] == "fail"  # no device-plugins dir under the given root
    table = CliRunner().invoke(
        main,
        ["doctor", "--sysfs-root", str(FIXTURES / "empty-node" / "sys"), "--metrics-address", ""],
    )
    assert table.exit_code == 1
    assert table.stdout.splitlines()[-1].endswith("keep devices from pods")
    assert "modprobe" not in table.stdout and "lspci" not in table.stdout


def case_report(tmp_path: Path, case: str) -> dict[str, list[dict[str, Any]]]:
    """doctor's rows, by check, on one of the node cases built under ``tmp_path``."""
    CASES[case](tmp_path)
    args = ["doctor", "-o", "json", "--sysfs-root", str(tmp_path / "sys")]
    args += ["--dev-root", str(tmp_path / "dev"), "--nfd-features-file", ""]
    result = CliRunner().invoke(main, [*args, "--metrics-address", "", "--kubelet-root", "/none"])
    assert result.exit_code == 1, result.output
    text = result.stdout
    assert "lspci" not in text and "<" not in text, text  # no placeholder, no missing tool
    return by_check(json.loads(text))


def test_an_x86_node_is_told_it_has_no_kae_hardware(tmp_path: Path) -> None:
    """Other vendors' PCI functions and a CPU without MIDR_EL1: no hardware, no driver advice."""
    rows = case_report(tmp_path, "no-kae-hardware")
    (hardware,) = rows["hardware"]
    assert hardware["status"] == "fail"
    assert "no KAE hardware on this node" in hardware["detail"]
    assert "none of the 2 PCI functions" in hardware["detail"] and "not arm64" in hardware["detail"]
    assert not any(check.startswith("engine ") for check in rows)
    assert "modprobe" not in json.dumps(rows)


def test_engines_without_a_driver_name_their_addresses_and_module(tmp_path: Path) -> None:
    """Kunpeng 920 engines on the bus, no module: each engine names its PFs and its modprobe."""
    rows = case_report(tmp_path, "driver-not-loaded")
    assert rows["hardware"][0]["status"] == "ok"
    assert "HiSilicon Kunpeng 920" in rows["hardware"][0]["detail"]
    for engine in ENGINES:
        (row,) = rows[f"engine {engine.name}"]
        assert row["status"] == "fail" and "driver not loaded" in row["detail"]
        addresses = [a for (d, _), (a, _) in KUNPENG920_PFS.items() if d == engine.driver]
        assert all(address in row["detail"] for address in addresses)
        assert row["fixes"] == [
            f"on the node: modprobe {engine.driver} (openEuler's KAE driver packages provide it)"
        ]


def test_a_driver_loaded_without_uacce_says_uacce_mode(tmp_path: Path) -> None:
    """Bound drivers loaded with uacce_mode=0: the fix reloads that module with uacce_mode=1."""
    rows = case_report(tmp_path, "no-uacce-device")
    for engine in ENGINES:
        (row,) = rows[f"engine {engine.name}"]
        assert row["status"] == "fail"
        assert f"driver {engine.driver} loaded, no uacce device" in row["detail"]
        driver = engine.driver
        assert f"modprobe -r {driver} && modprobe {driver} uacce_mode=1" in row["fixes"][0]
    assert rows["uacce class"][0]["status"] == "fail"


def test_a_function_bound_to_another_driver_is_named_with_its_rebind(tmp_path: Path) -> None:
    """An HPRE PF taken by vfio-pci: the row names both drivers and the sysfs rebind."""
    CASES["no-uacce-device"](tmp_path)
    set_driver_bound(tmp_path, "0000:79:00.0", True, "vfio-pci")
    result = CliRunner().invoke(
        main,
        ["doctor", "-o", "json", "--sysfs-root", str(tmp_path / "sys"), "--metrics-address", "",
         "--nfd-features-file", "", "--dev-root", str(tmp_path / "dev")],
    )  # fmt: skip
    (row,) = by_check(json.loads(result.stdout))["engine hpre"]
    assert "0000:79:00.0 to vfio-pci" in row["detail"]
    assert row["fixes"] == [
        "echo 0000:79:00.0 > /sys/bus/pci/drivers/vfio-pci/unbind; "
        "echo 0000:79:00.0 > /sys/bus/pci/drivers/hisi_hpre/bind"
    ]


def test_a_healthy_node_with_a_registered_daemon_passes(tmp_path: Path) -> None:
    """The two-socket node, a kubelet, a daemon registered and ready, the NFD file: exit 0."""
    with (
        observed_node("kunpeng920-2p") as node,
        PodResourcesEmulator(node.workdir / "kubelet" / "pod-resources" / "kubelet.sock"),
    ):
        assert node.wait_registered(3)
        features = tmp_path / "kae"
        FeatureFile(features).update(feature_labels(node.runner.daemon.inventory))
        address = node.base_url.removeprefix("http://")
        args = ["--kubelet-root", str(node.workdir / "kubelet"), "--metrics-address", address]
        code, report = doctor("kunpeng920-2p", *args, "--nfd-features-file", str(features))
        statuses = {row["check"]: row["status"] for row in report["checks"]}
        assert code == 0 and report["ok"] is True, report
        assert set(statuses.values()) == {"ok"}
        (daemon,) = by_check(report)["daemon"]
        assert (
            "openfuyao.com/kae.hpre, openfuyao.com/kae.sec, openfuyao.com/kae.zip"
            in daemon["detail"]
        )
        assert by_check(report)["plugin sockets"][0]["detail"].count("kae-") == 3


def test_a_daemon_the_kubelet_never_registered_blocks(tmp_path: Path) -> None:
    """No kubelet: the daemon answers /readyz with 503, which doctor reports as blocking."""
    with observed_node("kunpeng920-2p", start_kubelet=False) as node:
        address = node.base_url.removeprefix("http://")
        args = ["--kubelet-root", str(node.workdir / "kubelet"), "--metrics-address", address]
        code, report = doctor("kunpeng920-2p", *args)
        rows = by_check(report)
        assert code == 1
        assert rows["daemon"][0]["status"] == "fail" and "not ready" in rows["daemon"][0]["detail"]
        assert rows["kubelet"][0]["status"] in {"fail"}  # no kubelet.sock


def test_an_expired_feature_file_warns_without_blocking(tmp_path: Path) -> None:
    """A feature file past its expiry means no daemon renews it: a warning, not a failure."""
    features = tmp_path / "kae"
    past = datetime.now(UTC) - timedelta(hours=3)
    inventory = scan(FIXTURES / "kunpeng920-2p" / "sys", FIXTURES / "kunpeng920-2p" / "dev")
    FeatureFile(features, clock=lambda: past).update(feature_labels(inventory))
    _code, report = doctor("kunpeng920-2p", "--nfd-features-file", str(features))
    (row,) = by_check(report)["nfd feature file"]
    assert row["status"] == "warn" and "expired" in row["detail"]
    _code, report = doctor("kunpeng920-2p", "--nfd-features-file", str(tmp_path / "none"))
    assert by_check(report)["nfd feature file"][0]["status"] == "warn"


def test_a_malformed_metrics_address_is_one_failing_row() -> None:
    """A bad --metrics-address is reported as a row naming it, not a traceback."""
    code, report = doctor("kunpeng920-2p", "--metrics-address", "nonsense")
    (row,) = by_check(report)["daemon"]
    assert code == 1 and row["status"] == "fail" and "nonsense" in row["detail"]


def test_a_loaded_driver_not_bound_to_a_function_names_the_bind(tmp_path: Path) -> None:
    """A ZIP PF left unbound while hisi_zip is loaded: the fix binds exactly that address."""
    CASES["no-uacce-device"](tmp_path)
    set_driver_bound(tmp_path, "0000:b5:00.0", False)
    result = CliRunner().invoke(
        main,
        ["doctor", "-o", "json", "--sysfs-root", str(tmp_path / "sys"), "--metrics-address", "",
         "--nfd-features-file", "", "--dev-root", str(tmp_path / "dev")],
    )  # fmt: skip
    (row,) = by_check(json.loads(result.stdout))["engine zip"]
    assert row["detail"] == "driver hisi_zip loaded, not bound to 0000:b5:00.0"
    assert row["fixes"][0] == "on the node: echo 0000:b5:00.0 > /sys/bus/pci/drivers/hisi_zip/bind"


def test_cdi_on_over_a_runtime_with_cdi_off_warns_in_device_plugin_mode(tmp_path: Path) -> None:
    """Device plugin with cdi on: the runtime's config says CDI is off, so the daemon names
    device nodes instead; doctor says so (WARN, with the switch), and blocks nothing for it."""
    runtime = tmp_path / "config.toml"
    runtime.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = false\n')
    config = tmp_path / "kae.yaml"
    config.write_text(f"version: v1\ncdi: true\ndra:\n  runtimeConfig: {runtime}\n")
    _, report = doctor("kunpeng920-2p", "--config", str(config))
    (row,) = by_check(report)["runtime cdi"]
    assert row["status"] == "warn" and "enable_cdi = false" in row["detail"], row
    runtime.write_text("version = 3\n")
    _, report = doctor("kunpeng920-2p", "--config", str(config))
    assert by_check(report)["runtime cdi"][0]["status"] == "ok"
    config.write_text("version: v1\ncdi: false\n")
    _, report = doctor("kunpeng920-2p", "--config", str(config))
    assert "runtime cdi" not in by_check(report)
