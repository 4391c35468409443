"""Fake nodes for the benchmarks: trees in memory, `serve` as a real process, the kubelet emulator.

The daemon runs as its own process (as in a DaemonSet), so its RSS and CPU are its own and its
gRPC server does not share a GIL with the emulator that plays the kubelet.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench_mode import TICKS, Mode

from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_builder import build_tree
from kae_deviceplugin.testing.sysfs_trees import TREES, large_tree

DEADLINE = 30.0  # s: a daemon that is not registered by then is broken, not slow
TWO_SOCKET = "kunpeng920-2p"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

Tree = str | int  # a named tree, or a generated tree of that many devices


def tree_label(tree: Tree) -> str:
    return f"{tree:,}-device tree" if isinstance(tree, int) else f"{tree} tree"


@contextmanager
def scratch(prefix: str, memory: bool = True) -> Iterator[Path]:
    """A temporary directory: in /dev/shm when asked and present (trees of thousands of files
    build and scan at memory speed, as the real sysfs does), else under /tmp, whose short path
    also keeps unix socket paths under their ~100-byte limit."""
    base = "/dev/shm" if memory and os.path.isdir("/dev/shm") else "/tmp"
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def build(root: Path, tree: Tree) -> Inventory:
    """Build ``tree`` under ``root`` (``root/sys``, ``root/dev``) and return what a scan finds."""
    if isinstance(tree, int):
        build_tree(root, large_tree(tree))
    else:
        TREES[tree].build(root)
    return scan(root / "sys", root / "dev")


def free_port() -> int:
    """A loopback port nobody listens on right now, for one daemon's metrics endpoint."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def plugin_dir(work: Path) -> Path:
    return work / "kubelet" / "device-plugins"


def serve_command(root: Path, work: Path, config: str | None = None) -> list[str]:
    """`serve` at its defaults but for where things are: the tree, the kubelet root, the state
    and NFD files under ``work``, and the metrics endpoint on a free loopback port (so several
    daemons can run at once)."""
    return [
        sys.executable,
        "-m",
        "kae_deviceplugin",
        "serve",
        "--sysfs-root",
        str(root / "sys"),
        "--dev-root",
        str(root / "dev"),
        "--kubelet-root",
        str(work / "kubelet"),
        "--state-dir",
        str(work / "state"),
        "--nfd-features-file",
        str(work / "nfd-features"),
        "--metrics-address",
        f"127.0.0.1:{free_port()}",
        *(["--config", _write_config(work, config)] if config else []),
    ]


def _write_config(work: Path, text: str) -> str:
    path = work / "config.yaml"
    path.write_text(text)
    return str(path)


def registered_since(kubelet: KubeletEmulator, resources: Sequence[str], since: float) -> bool:
    """Every resource registered after ``since`` and its stream is up with devices listed."""
    fresh = {r.resource for r in kubelet.registrations if r.time >= since}
    if not set(resources) <= fresh:
        return False
    for resource in resources:
        state = kubelet.state(resource)
        if state is None or state.stream_ended or not state.devices:
            return False
    return True


def last_registration(kubelet: KubeletEmulator, resources: Sequence[str], since: float) -> float:
    """monotonic() of the Register that completed the set: the latest first one per resource."""
    first: dict[str, float] = {}
    for record in kubelet.registrations:
        if record.time >= since and record.resource in resources:
            first.setdefault(record.resource, record.time)
    return max(first.values())


@dataclass
class ServedNode:
    """A node whose tree is served by a `serve` process to a kubelet emulator."""

    root: Path
    plugin_dir: Path
    inventory: Inventory
    kubelet: KubeletEmulator
    process: subprocess.Popen[bytes]
    started: float  # monotonic() just before the process was spawned
    log: Path

    @property
    def resources(self) -> list[str]:
        return sorted(self.inventory.resources)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_registered(self, since: float | None = None, timeout: float = DEADLINE) -> float:
        """Wait for every resource to register; when the set was complete (monotonic)."""
        since = self.started if since is None else since

        def settled(kubelet: KubeletEmulator) -> bool:
            # A dying daemon ends its streams, which wakes this wait to notice the exit.
            dead = self.process.poll() is not None
            return dead or registered_since(kubelet, self.resources, since)

        ok = self.kubelet.wait_for(settled, timeout)
        if not ok or self.process.poll() is not None:
            print(f"daemon log, last lines:\n{self.tail()}", file=sys.stderr)
        if self.process.poll() is not None:
            raise RuntimeError(f"daemon exited with {self.process.returncode}: {self.problem()}")
        if not ok:
            raise RuntimeError(f"daemon did not register in {timeout} s: {self.problem()}")
        return last_registration(self.kubelet, self.resources, since)

    def problem(self) -> str:
        """The line of the daemon's log that explains a failure: the exception of the last
        traceback if there is one (the only unindented line without a timestamp), else the last
        error line."""
        lines = self.tail(200).splitlines()
        exceptions = [
            line
            for line in lines
            if line and not line[0].isspace() and not line[0].isdigit() and ": " in line
        ]
        errors = [line for line in lines if "CRITICAL" in line or "ERROR" in line]
        return (exceptions or errors or lines or ["(empty log)"])[-1]

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def spawn(
    root: Path,
    work: Path,
    log: Path,
    config: str | None = None,
    *,
    mode: Mode = TICKS,
    checkout: Path | None = None,
) -> tuple[subprocess.Popen[bytes], float]:
    """Start `serve` on the tree at ``root`` in ``mode`` (from ``checkout``, another copy of
    the repository, when given: ``-m`` imports from the working directory); also when it
    started (monotonic)."""
    command, env = mode.command(serve_command(root, work, config), root)
    with log.open("ab") as sink:
        started = time.monotonic()
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=checkout
        )
    return process, started


def stop(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM as the kubelet's pod deletion does; SIGKILL only if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def served(
    tree: Tree,
    *,
    wait: bool = True,
    config: str | None = None,
    mode: Mode = TICKS,
    checkout: Path | None = None,
) -> Iterator[ServedNode]:
    """Build ``tree``, start a kubelet emulator and `serve` in ``mode`` (with ``config`` as its
    file if given); stop both on exit."""
    with scratch("kaebench") as tree_dir, scratch("kb", memory=False) as work:
        inventory = build(tree_dir, tree)
        kubelet = KubeletEmulator(plugin_dir(work), dial_timeout=5.0)
        kubelet.start()
        process, started = spawn(
            tree_dir, work, work / "daemon.log", config, mode=mode, checkout=checkout
        )
        node = ServedNode(
            tree_dir, plugin_dir(work), inventory, kubelet, process, started, work / "daemon.log"
        )
        try:
            if wait:
                node.wait_registered()
            yield node
        finally:
            stop(process)
            kubelet.stop()


def rss_mib(pid: int) -> float:
    """Resident set size from /proc/<pid>/status (VmRSS, in kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` so far: nanoseconds from each thread's schedstat
    (the scheduler's own count), else utime + stime from /proc/<pid>/stat in clock ticks, too
    coarse (10 ms) for a process that uses a few ms in a window."""
    try:
        return (
            sum(
                int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
                for task in os.listdir(f"/proc/{pid}/task")
            )
            / 1e9
        )
    except (OSError, ValueError, IndexError):
        pass
    text = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may hold spaces; the fields after its ')' are fixed.
    fields = text[text.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLOCK_TICKS


def bare_interpreter_rss() -> float:
    """RSS of this Python doing nothing: what any Python daemon costs before its own code."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; print(1, flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        process.stdout.readline()
        return rss_mib(process.pid)
    finally:
        process.kill()
        process.wait()
