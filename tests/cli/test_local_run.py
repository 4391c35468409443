"""Running serve locally against the bundled kubelet emulator, and shell completion."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 60.0


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_demo_serve_keeps_the_daemon_up_until_ctrl_c() -> None:
    """`demo --serve HOST:PORT`: the tour, then /readyz answers 200 until SIGINT ends it with 0."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "kae_deviceplugin", "demo", "--serve", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        deadline = time.monotonic() + DEADLINE
        for line in process.stdout:
            if "Serving on until Ctrl-C" in line or time.monotonic() > deadline:
                break
        assert f"http://127.0.0.1:{port}/metrics" in line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as answer:
            assert answer.status == 200
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=DEADLINE)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=DEADLINE)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr


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
