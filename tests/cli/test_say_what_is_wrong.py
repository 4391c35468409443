"""Silent zeros and mistyped paths are said out loud: list's totals, serve's refusals of a bad
kubelet root or a busy metrics port, unknown KAE_DP_* variables."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from kae_deviceplugin.cli.main import main
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.cli.test_startup_errors import one_line, serve
from tests.support.harness import short_tmpdir

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "sysfs_fixtures"


def list_table(tree: str) -> list[str]:
    args = ["list", "--sysfs-root", str(FIXTURES / tree / "sys")]
    result = CliRunner().invoke(main, [*args, "--dev-root", str(FIXTURES / tree / "dev")])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_list_ends_with_the_totals() -> None:
    """The last line counts the devices, healthy and unhealthy, as the scan judged them."""
    assert list_table("kunpeng920-2p")[-1] == "6 devices: 6 healthy, 0 unhealthy"
    inventory = scan(FIXTURES / "faults" / "sys", FIXTURES / "faults" / "dev")
    healthy = sum(d.healthy for d in inventory)
    last = list_table("faults")[-1]
    assert last.startswith(f"{len(inventory)} devices: {healthy} healthy, ")
    assert f"{len(inventory) - healthy} unhealthy" in last and "doctor" in last


def test_list_without_devices_points_to_doctor() -> None:
    """A node without KAE devices is not a bare "none": the line names the command that says why."""
    (line,) = list_table("empty-node")
    assert "no KAE devices found" in line and "kae-deviceplugin doctor" in line


def _roots(workdir: Path) -> list[str]:
    TREES["kunpeng920-2p"].build(workdir / "node")
    return [
        "--sysfs-root", str(workdir / "node" / "sys"), "--dev-root", str(workdir / "node" / "dev"),
        "--state-dir", str(workdir / "state"),
    ]  # fmt: skip


def test_a_kubelet_root_that_is_a_file_is_one_line_with_exit_2() -> None:
    """--kubelet-root naming a file: the path and what it must be, not "run as root"."""
    with short_tmpdir() as workdir:
        (workdir / "kubelet").write_text("")
        done = serve(*_roots(workdir), "--kubelet-root", str(workdir / "kubelet"))
        assert done.returncode == 2
        line = one_line(done.stderr)
        assert f"--kubelet-root {workdir / 'kubelet'} is not a directory" in line
        assert "run as root" not in line


def test_a_kubelet_root_that_does_not_exist_is_refused_not_created() -> None:
    """A mistyped root is neither created nor waited on: exit 2 at once, naming it."""
    with short_tmpdir() as workdir:
        typo = workdir / "kubelte"
        done = serve(*_roots(workdir), "--kubelet-root", str(typo), timeout=30)
        assert done.returncode == 2
        assert f"--kubelet-root {typo} does not exist" in one_line(done.stderr)
        assert not typo.exists()


def test_a_busy_metrics_port_stops_serve_with_exit_3() -> None:
    """The documented policy: a port that cannot be bound at start is exit 3, one line."""
    with short_tmpdir() as workdir, socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        (workdir / "kubelet").mkdir()
        args = [*_roots(workdir), "--kubelet-root", str(workdir / "kubelet")]
        done = serve(*args, "--metrics-address", address, timeout=30)
        assert done.returncode == 3
        line = one_line(done.stderr)
        assert f"--metrics-address {address}: cannot listen (address already in use)" in line


def test_an_unknown_kae_dp_variable_is_a_warning_with_a_guess() -> None:
    """KAE_DP_SCAN_INTERVALL is said to be ignored, with the variable it was likely meant to be."""
    env = {**os.environ, "KAE_DP_SCAN_INTERVALL": "5", "KAE_DP_OUTPUT": "json"}
    tree = FIXTURES / "kunpeng920-2p"
    done = subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", "list", "--sysfs-root", str(tree / "sys"),
         "--dev-root", str(tree / "dev")],
        env=env, capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert one_line(done.stderr) == (
        "warning: KAE_DP_SCAN_INTERVALL is not a kae-deviceplugin variable, so it is ignored; "
        "did you mean KAE_DP_SCAN_INTERVAL?"
    )  # KAE_DP_OUTPUT is list's own: no warning, and applied
    assert done.stdout.startswith("[")
