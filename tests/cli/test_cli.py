"""The `kae-deviceplugin` command line as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from kae_deviceplugin import __version__
from kae_deviceplugin.cli.listing import JSON_KEYS
from kae_deviceplugin.cli.main import main

FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"


def list_json(tree: str, **env: str) -> list[dict[str, object]]:
    args = ["list", "--output", "json"]
    if "KAE_DP_SYSFS_ROOT" not in env:
        args += [
            "--sysfs-root",
            str(FIXTURES / tree / "sys"),
            "--dev-root",
            str(FIXTURES / tree / "dev"),
        ]
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert isinstance(data, list)
    return data


def test_list_json_on_the_two_socket_fixture() -> None:
    """JSON lists the six devices with every documented key and the right values."""
    devices = list_json("kunpeng920-2p")
    assert len(devices) == 6
    for device in devices:
        assert set(JSON_KEYS) <= set(device)
    by_name = {d["name"]: d for d in devices}
    assert by_name["hisi_hpre-3"]["pci_address"] == "0000:b9:00.0"
    assert by_name["hisi_hpre-3"]["numa_node"] == 2
    assert by_name["hisi_hpre-3"]["function"] == "pf"
    assert by_name["hisi_hpre-3"]["health"] == "Healthy"
    assert by_name["hisi_hpre-3"]["resource"] == "openfuyao.com/kae.hpre"
    assert by_name["hisi_zip-4"]["algorithms"] == ["zlib", "gzip"]
    assert by_name["hisi_zip-4"]["dev_node"] == "/dev/hisi_zip-4"
    assert {d["sva"] for d in devices} == {True}  # flags 129 (issue 37)


def test_roots_come_from_the_environment() -> None:
    """KAE_DP_SYSFS_ROOT / KAE_DP_DEV_ROOT stand in for the flags."""
    tree = FIXTURES / "kunpeng920-2p-vfs"
    devices = list_json("", KAE_DP_SYSFS_ROOT=str(tree / "sys"), KAE_DP_DEV_ROOT=str(tree / "dev"))
    assert sum(d["function"] == "vf" for d in devices) == 12


def test_empty_node_is_an_empty_list_and_exit_zero() -> None:
    """A node without KAE prints [] and succeeds."""
    assert list_json("empty-node") == []


def test_table_shows_health_reasons() -> None:
    """The table names each unhealthy device's reason."""
    result = CliRunner().invoke(
        main,
        [
            "list",
            "--sysfs-root",
            str(FIXTURES / "faults" / "sys"),
            "--dev-root",
            str(FIXTURES / "faults" / "dev"),
        ],
    )
    assert result.exit_code == 0
    assert "isolated" in result.stdout and "engine-stopped" in result.stdout
    assert result.stdout.splitlines()[0].split()[:3] == ["ENGINE", "NAME", "PCI"]


def test_missing_root_is_one_clear_line_and_nonzero(tmp_path: Path) -> None:
    """A root that does not exist: one error line naming it, exit code 2 (a bad option value)."""
    result = CliRunner().invoke(main, ["list", "--sysfs-root", str(tmp_path / "nope")])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "nope" in lines[0] and "--sysfs-root" in lines[0]


def test_version_flag() -> None:
    """--version prints the package version."""
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


def test_console_script_module_runs() -> None:
    """`python -m kae_deviceplugin list` works as an installed console script would."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kae_deviceplugin",
            "list",
            "-o",
            "json",
            "--sysfs-root",
            str(FIXTURES / "kunpeng920-v3" / "sys"),
            "--dev-root",
            str(FIXTURES / "kunpeng920-v3" / "dev"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert {d["api"] for d in json.loads(out.stdout)} == {"hisi_qm_v3"}


def test_check_config_reports_every_problem(tmp_path: Path) -> None:
    """check-config lists each bad value with its path and exits 1; a good file exits 0."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\nscanInterval: -3\nengines:\n  hpre: {shares: 0}\n")
    result = CliRunner().invoke(main, ["check-config", str(bad)])
    assert result.exit_code == 1
    assert "scanInterval" in result.output and "engines.hpre.shares" in result.output
    good = tmp_path / "good.yaml"
    good.write_text("version: v1\nengines:\n  sec: {enabled: false}\n")
    assert CliRunner().invoke(main, ["check-config", str(good)]).exit_code == 0


def test_serve_rejects_bad_flags_listing_all(tmp_path: Path) -> None:
    """Invalid settings from flags stop serve before it starts, naming every flag (exit 2)."""
    result = CliRunner().invoke(
        main, ["serve", "--scan-interval", "0", "--metrics-address", "nonsense:99999"]
    )
    assert result.exit_code == 2
    assert "--scan-interval" in result.output and "--metrics-address" in result.output


def test_list_allocations_shows_pods_from_the_pod_resources_socket() -> None:
    """`list --allocations` with no daemon answering falls back to the kubelet's pod-resources
    socket and shows which pod holds which KAE device (other resources filtered out)."""
    from kae_deviceplugin.testing.podresources_emulator import PodResourcesEmulator
    from tests.support.harness import short_tmpdir

    with short_tmpdir() as workdir, PodResourcesEmulator(workdir / "pr.sock") as kubelet:
        kubelet.set_pods(
            [
                ("shop", "checkout-7d9", "tls", "openfuyao.com/kae.hpre", ["0000:79:00.0"]),
                ("shop", "checkout-7d9", "gzip", "openfuyao.com/kae.zip", ["0000:b5:00.0"]),
                ("ml", "trainer-0", "main", "nvidia.com/gpu", ["GPU-1"]),
            ]
        )
        args = ["list", "--allocations", "--endpoint", "http://127.0.0.1:1"]
        args += ["--pod-resources-socket", str(workdir / "pr.sock")]
        table = CliRunner().invoke(main, args)
        assert table.exit_code == 0, table.output
        assert "checkout-7d9" in table.stdout and "0000:79:00.0" in table.stdout
        assert "trainer-0" not in table.stdout
        as_json = CliRunner().invoke(main, [*args, "-o", "json"])
        records = json.loads(as_json.stdout)
        assert {(r["pod"], r["container"], r["device_id"]) for r in records} == {
            ("checkout-7d9", "tls", "0000:79:00.0"),
            ("checkout-7d9", "gzip", "0000:b5:00.0"),
        }


def test_list_allocations_with_nothing_to_ask_is_one_error_line(tmp_path: Path) -> None:
    """No daemon and no socket: exit 1 with one line naming both places asked."""
    result = CliRunner().invoke(
        main,
        ["list", "--allocations", "--endpoint", "http://127.0.0.1:1",
         "--pod-resources-socket", str(tmp_path / "none.sock")],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "127.0.0.1:1" in result.output and "none.sock" in result.output
