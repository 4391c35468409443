"""Messages an operator meets when a value is wrong: the value is named where it was written (a
flag, a KAE_DP_* variable, NODE_NAME, or the config file's key), a host that does not resolve is
named instead of the resolver's error number, and a reload names the file's keys. Each command
runs for real, in a subprocess, and its stderr is read."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.cli.test_startup_errors import one_line

REPO = Path(__file__).resolve().parents[2]
BAD_NODE = "Worker_1"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KAE_DP_")}
    clean.pop("NODE_NAME", None)
    return subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
        env=clean | (env or {}),
    )  # fmt: skip


def roots(tmp_path: Path) -> list[str]:
    TREES["kunpeng920-2p"].build(tmp_path / "node")
    node = tmp_path / "node"
    return ["--sysfs-root", str(node / "sys"), "--dev-root", str(node / "dev")]


@pytest.mark.parametrize("command", ["serve", "doctor"])
def test_node_name_from_the_environment_is_judged_like_the_flag(
    command: str, tmp_path: Path
) -> None:
    """A NODE_NAME that --node-name would refuse stops DRA mode with exit 2 and one line naming
    the variable, its value and the rule; --node-name's own refusal says the same."""
    done = run(command, "--mode", "dra", *roots(tmp_path), env={"NODE_NAME": BAD_NODE})
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith("error: NODE_NAME: must be a node name") and BAD_NODE in line
    flag = run(command, "--mode", "dra", "--node-name", BAD_NODE, *roots(tmp_path))
    assert flag.returncode == 2 and "must be a node name" in one_line(flag.stderr)


def test_node_name_is_not_read_in_device_plugin_mode_or_when_the_flag_names_the_node(
    tmp_path: Path,
) -> None:
    """Device-plugin mode never reads NODE_NAME, and --node-name beats it: neither refuses it."""
    args = ("doctor", "--metrics-address", "", "--nfd-features-file", "", *roots(tmp_path))
    plain = run(*args, env={"NODE_NAME": BAD_NODE})
    assert "NODE_NAME" not in plain.stderr
    named = run(*args, "--mode", "dra", "--node-name", "worker-1", env={"NODE_NAME": BAD_NODE})
    assert "NODE_NAME" not in named.stderr


@pytest.mark.parametrize("command", [("serve", "--metrics-address"), ("demo", "--serve")])
def test_a_host_that_does_not_resolve_is_named(command: tuple[str, str], tmp_path: Path) -> None:
    """An unresolvable host: exit 2 and one line naming the host and saying it does not resolve,
    not "unknown error -2; free the port"; the demo's port 0 (any free port) is checked too."""
    name, flag = command
    extra = [*roots(tmp_path), "--kubelet-root", str(tmp_path)] if name == "serve" else []
    ports = ("9410", "0") if name == "demo" else ("9410",)  # serve refuses port 0 as such
    for address in (f"kae-no-such-host.invalid:{port}" for port in ports):
        done = run(name, flag, address, *extra)
        assert done.returncode == 2, done.stderr
        line = one_line(done.stderr)
        assert "'kae-no-such-host.invalid' does not resolve" in line and address in line
        assert "unknown error" not in line.lower() and "free the port" not in line


def write_config(tmp_path: Path, kubelet_root: str) -> Path:
    path = tmp_path / "config.yaml"
    node = tmp_path / "node"
    path.write_text(
        f"version: v1\nmetricsAddress: ''\nregistration: kubelet-socket\n"
        f"paths: {{kubeletRoot: {kubelet_root}, sysfsRoot: {node / 'sys'}, "
        f"devRoot: {node / 'dev'}, nfdFeaturesFile: ''}}\n"
    )
    return path


def test_a_bad_value_from_the_config_file_is_named_by_its_key(tmp_path: Path) -> None:
    """paths.kubeletRoot naming a file: the refusal names the file and its key, not the flag
    --kubelet-root nobody typed; the same value from KAE_DP_KUBELET_ROOT names the variable."""
    roots(tmp_path)
    config = write_config(tmp_path, "/etc/passwd")
    done = run("serve", "--config", str(config))
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert f"{config}: paths.kubeletRoot /etc/passwd is not a directory" in line
    assert "--kubelet-root /etc" not in line
    fine = write_config(tmp_path, str(tmp_path))
    by_env = run("serve", "--config", str(fine), env={"KAE_DP_KUBELET_ROOT": "/etc/passwd"})
    assert by_env.returncode == 2
    assert "KAE_DP_KUBELET_ROOT /etc/passwd is not a directory" in one_line(by_env.stderr)


def test_a_reload_that_needs_a_restart_names_the_files_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reloaded dra.unhealthyTaintEffect is named as the file spells it, not by its field."""
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\nmode: dra\n")
    source = ConfigSource(path, {})
    running = source.initial()
    path.write_text("version: v1\nmode: dra\ndra: {unhealthyTaintEffect: NoExecute}\n")
    with caplog.at_level(logging.WARNING):
        source.load(running)
    assert "dra.unhealthyTaintEffect" in caplog.text
    assert "unhealthy_taint_effect" not in caplog.text
