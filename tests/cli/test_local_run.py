"""Running serve locally against the bundled kubelet emulator, and shell completion."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 60.0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.status == 200
        text: str = answer.read().decode()
        return text


def test_demo_serve_on_port_0_prints_the_bound_address_and_shows_its_holders() -> None:
    """`demo --serve 127.0.0.1:0`: the URL with the real port; /readyz 200; /allocations,
    kae_device_allocated and `list --allocations` name the demo's three pods; SIGINT ends it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "kae_deviceplugin", "demo", "--serve", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        deadline = time.monotonic() + DEADLINE
        for line in process.stdout:
            if line.startswith("Listening on ") or time.monotonic() > deadline:
                break
        match = re.match(r"Listening on (http://127\.0\.0\.1:([0-9]+)):", line)
        assert match is not None and int(match[2]) > 0, line
        url = match[1]
        _get(f"{url}/readyz")
        holders = json.loads(_get(f"{url}/allocations"))["allocations"]
        assert sorted(h["pod"] for h in holders) == ["demo-hpre", "demo-sec", "demo-zip"]
        allocated = [
            line for line in _get(f"{url}/metrics").splitlines()
            if line.startswith("kae_device_allocated{") and line.endswith(" 1.0")
        ]  # fmt: skip
        assert len(allocated) == 3 and all('namespace="demo"' in s for s in allocated)
        listed = subprocess.run(
            [sys.executable, "-m", "kae_deviceplugin", "list", "--allocations", "--endpoint", url],
            capture_output=True, text=True, timeout=DEADLINE, check=True, cwd=REPO,
        )  # fmt: skip
        assert all(f"demo-{engine}" in listed.stdout for engine in ("hpre", "sec", "zip"))
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=DEADLINE)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=DEADLINE)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize(
    ("address", "code", "said"),
    [
        ("nonsense", 2, "must be host:port or :port"),
        (":99999", 2, "with a port from 1 to 65535"),
        ("", 2, "must be host:port or :port"),
        ("[::1", 2, "a host in brackets must be an IPv6 address"),
    ],
)
def test_demo_serve_refuses_what_serve_refuses(address: str, code: int, said: str) -> None:
    """A --serve value serve would refuse as --metrics-address: one line, exit 2, no tour."""
    done = subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", "demo", "--serve", address],
        capture_output=True, text=True, timeout=DEADLINE, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == code, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: --serve") and said in line
    assert done.stdout == ""


def test_demo_serve_on_a_busy_port_is_one_line_with_exit_3() -> None:
    """A port another process listens on: the demo says so at once (exit 3), as serve does."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "-m", "kae_deviceplugin", "demo", "--serve", address],
            capture_output=True, text=True, timeout=DEADLINE, check=False, cwd=REPO,
        )  # fmt: skip
    assert done.returncode == 3
    (line,) = done.stderr.splitlines()
    assert address in line and "address already in use" in line


def test_shell_completion_script_is_offered() -> None:
    """The README's completion line prints a bash completion script for every command."""
    env = {**os.environ, "_KAE_DEVICEPLUGIN_COMPLETE": "bash_source"}
    done = subprocess.run(
        [sys.executable, "-c", "from kae_deviceplugin.cli.main import main; "
         "main(prog_name='kae-deviceplugin')"],
        env=env, capture_output=True, text=True, timeout=DEADLINE, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "complete " in done.stdout and "kae-deviceplugin" in done.stdout
