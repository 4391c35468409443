"""doctor's ``mode`` row: an explicit mode is the configuration's; ``mode: auto`` reads the
choice the daemon recorded at its last start, shows it with its reason, and checks that mode
(the DRA driver's rows for a node that chose DRA, the kubelet's for the device plugin)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kae_deviceplugin.cli import doctor
from kae_deviceplugin.cli.main import main
from kae_deviceplugin.daemon.mode_choice import Facts, decide
from kae_deviceplugin.daemon.mode_state import write_choice
from tests.cli.dra_node import dra_node
from tests.cli.test_doctor import FIXTURES, by_check
from tests.daemon.test_mode_choice import READY  # facts on which every check passes

NOW = 1_800_000_000.0


def doctor_auto(tmp_path: Path, state: Path, mode: str = "auto") -> dict[str, list[dict[str, Any]]]:
    """doctor -o json on a fixture tree with a config file naming ``mode`` and ``state``."""
    config = tmp_path / "config.yaml"
    config.write_text(f"version: v1\nmode: {mode}\npaths:\n  stateDir: {state}\n")
    tree = FIXTURES / "kunpeng920-2p"
    args = ["doctor", "-o", "json", "--config", str(config), "--sysfs-root", str(tree / "sys"),
            "--dev-root", str(tree / "dev"), "--kubelet-root", str(tmp_path / "kubelet"),
            "--nfd-features-file", "", "--metrics-address", ""]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code in (0, 1), result.output
    return by_check(json.loads(result.stdout))


def test_doctor_names_the_mode_auto_chose_and_why(tmp_path: Path) -> None:
    """No choice recorded yet: a warning naming the file, and the device plugin's checks (what
    the daemon serves until it chooses). A recorded device-plugin choice: its reason code and
    detail in the row, the kubelet's checks, no DRA driver row."""
    state = tmp_path / "state"
    rows = doctor_auto(tmp_path, state)
    [row] = rows["mode"]
    assert row["status"] == "warn" and "mode-choice.json" in row["detail"]
    assert "kubelet" in rows and "dra registration" not in rows
    off = Facts(True, True, "v1.33.13")
    write_choice(state, decide(off, "dra", None, NOW))
    rows = doctor_auto(tmp_path, state)
    [row] = rows["mode"]
    assert row["status"] == "ok"
    assert row["detail"].startswith("device-plugin (auto, kubelet-too-old): kubelet v1.33.13")
    assert "kubelet" in rows and "dra registration" not in rows


def test_doctor_checks_the_dra_driver_where_auto_chose_dra(tmp_path: Path) -> None:
    """A node whose daemon chose DRA: the row says dra-ready, and doctor checks the DRA
    driver (its registration, its slices) instead of the device plugin's sockets."""
    with dra_node() as node:
        node.publish()
        state = tmp_path / "state"
        write_choice(state, decide(READY, "dra", None, NOW))
        targets = dataclasses.replace(node.targets(), mode="auto", state_dir=state)
        rows = by_check({"checks": [dataclasses.asdict(r) for r in doctor.run_checks(
            targets, lambda _config: node.api)]})  # fmt: skip
    [row] = rows["mode"]
    assert row["status"] == "ok" and row["detail"].startswith("dra (auto, dra-ready): ")
    assert "dra registration" in rows and "plugin sockets" not in rows


def test_an_explicit_mode_is_the_configurations(tmp_path: Path) -> None:
    """mode device-plugin: the row says so, whatever the state file holds (a DRA choice of an
    earlier auto run)."""
    state = tmp_path / "state"
    write_choice(state, decide(READY, "dra", None, NOW))
    [row] = doctor_auto(tmp_path, state, "device-plugin")["mode"]
    assert (row["status"], row["detail"]) == ("ok", "device-plugin: configured")


def test_list_in_mode_auto_shows_the_mode_the_daemon_chose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """list --mode auto (KAE_DP_MODE=auto in the pod) reads the recorded choice from
    $KAE_DP_STATE_DIR: DRA's listing (each device's DRA name) once DRA was chosen, the device
    plugin's before any choice."""
    tree = FIXTURES / "kunpeng920-2p"
    state = tmp_path / "state"
    monkeypatch.setenv("KAE_DP_STATE_DIR", str(state))
    args = ["list", "--mode", "auto", "-o", "json", "--sysfs-root", str(tree / "sys"),
            "--dev-root", str(tree / "dev"), "--kubelet-root", str(tmp_path)]  # fmt: skip
    before = CliRunner().invoke(main, args)
    assert before.exit_code == 0, before.output
    write_choice(state, decide(READY, "dra", None, NOW))
    (tmp_path / "plugins" / "kae.openfuyao.com").mkdir(parents=True)  # the driver ran here
    after = CliRunner().invoke(main, args)
    assert after.exit_code == 0, after.output
    assert "hpre-0000-79-00-0" in after.stdout and "hpre-0000-79-00-0" not in before.stdout


def test_doctor_in_the_pod_reads_the_state_dir_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KAE_DP_MODE=auto and KAE_DP_STATE_DIR (the chart's auto pods set both, no --config):
    doctor finds the recorded choice there."""
    state = tmp_path / "state"
    write_choice(state, decide(Facts(True, False), "dra", None, NOW))
    monkeypatch.setenv("KAE_DP_MODE", "auto")
    monkeypatch.setenv("KAE_DP_STATE_DIR", str(state))
    tree = FIXTURES / "kunpeng920-2p"
    result = CliRunner().invoke(main, [
        "doctor", "-o", "json", "--sysfs-root", str(tree / "sys"), "--dev-root",
        str(tree / "dev"), "--nfd-features-file", "", "--metrics-address", "",
        "--kubelet-root", str(tmp_path),
    ])  # fmt: skip
    [row] = by_check(json.loads(result.stdout))["mode"]
    assert row["detail"].startswith("device-plugin (auto, no-dra-v1-api): "), row
