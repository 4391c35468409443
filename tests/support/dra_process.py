"""The real daemon in DRA mode as a subprocess (``python -m kae_deviceplugin serve --mode dra``),
against a test API server over HTTP, with the kubelet's side played by the test.

A node (``dra_node``) is a short directory under /tmp (socket paths stay under ~100 bytes)
holding a fixture sysfs tree built by ``sysfs_trees``, a kubelet root, a CDI dir and a state dir;
any number of daemons (``dra_process``) may run on it, each with its own ``POD_UID`` as in a
rolling update. The harness plays the kubelet: it finds the registration socket, asks GetInfo
and reports the registration, and dials the service socket with ``DRAKubelet``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2 as reg_pb
from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from kae_deviceplugin.dra.api import socket_paths
from kae_deviceplugin.kubelet.dial import OWN_CONNECTION, unix_target
from kae_deviceplugin.testing.sysfs_builder import DeviceSpec, build_tree
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.dra_kubelet import Claim, DRAKubelet, Prepared
from tests.support.harness import short_tmpdir
from tests.support.http_apiserver import HttpApiServer

REPO = Path(__file__).resolve().parents[2]
NODE = "worker-1"
DEADLINE = 10.0
POLL = 0.02
# What the child must not inherit: a proxy would take the loopback API server's traffic, and
# these would override the flags the harness gives.
UNSET = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
         "POD_UID", "NODE_NAME")  # fmt: skip


@dataclass(frozen=True)
class DraNode:
    """A node's directories: the sysfs and /dev tree under ``root``, the kubelet's root."""

    workdir: Path
    kubelet_dir: str = "kubelet"  # the kubelet root's name in ``workdir``

    @property
    def root(self) -> Path:
        return self.workdir / "node"

    @property
    def kubelet_root(self) -> Path:
        return self.workdir / self.kubelet_dir

    @property
    def cdi_dir(self) -> Path:
        return self.workdir / "cdi"

    def spec_path(self, claim_uid: str) -> Path:
        """Where a prepared claim's CDI spec is written."""
        return self.cdi_dir / f"openfuyao.com-kae_{claim_uid}.json"


@contextlib.contextmanager
def dra_node(
    tree: str = "kunpeng920-2p",
    *,
    devices: Sequence[DeviceSpec] | None = None,
    kubelet_root_length: int | None = None,
) -> Iterator[DraNode]:
    """A node with the named fixture tree (or one of ``devices``) and an empty kubelet root,
    whose path is ``kubelet_root_length`` bytes long if given."""
    with short_tmpdir() as workdir:
        name = "kubelet"
        if kubelet_root_length is not None:
            name = "k" * (kubelet_root_length - len(str(workdir)) - 1)
        node = DraNode(workdir, name)
        if devices is None:
            TREES[tree].build(node.root)
        else:
            build_tree(node.root, devices)
        node.kubelet_root.mkdir()
        yield node


def wait_until(check: Callable[[], Any], timeout: float = DEADLINE) -> bool:
    """Poll ``check`` until it is truthy (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL)
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class DraProcess:
    """One running ``serve --mode dra`` and how the kubelet reaches it."""

    node: DraNode
    process: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int
    pod_uid: str | None

    @property
    def registration_socket(self) -> Path:
        return socket_paths(self.node.kubelet_root, self.pod_uid)[0]

    @property
    def service_socket(self) -> Path:
        return socket_paths(self.node.kubelet_root, self.pod_uid)[1]

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log_lines(self) -> list[str]:
        """What the daemon logged so far (stderr and stdout), line by line."""
        return self.log_path.read_text(errors="replace").splitlines()

    def wait_log(self, text: str, timeout: float = DEADLINE) -> bool:
        """Wait until a logged line contains ``text``; False at the deadline or its exit."""
        return self.wait_for(lambda: any(text in line for line in self.log_lines()), timeout)

    def wait_for(self, check: Callable[[], bool], timeout: float = DEADLINE) -> bool:
        """``wait_until``, giving up at once when the daemon has exited (``check`` failing)."""
        wait_until(lambda: check() or not self.alive, timeout)
        return check()

    def wait_registration_socket(self, timeout: float = DEADLINE) -> bool:
        return self.wait_for(self.registration_socket.is_socket, timeout)

    def register(self, timeout: float = DEADLINE) -> reg_pb.PluginInfo:
        """What the kubelet's plugin watcher does with a new socket: GetInfo, then report that
        the registration succeeded. Waits for the socket first."""
        assert self.wait_registration_socket(timeout), self.describe()
        target = unix_target(self.registration_socket)
        with grpc.insecure_channel(target, options=[OWN_CONNECTION]) as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info: reg_pb.PluginInfo = stub.GetInfo(reg_pb.InfoRequest(), timeout=timeout)
            status = reg_pb.RegistrationStatus(plugin_registered=True)
            stub.NotifyRegistrationStatus(status, timeout=timeout)
        return info

    def readyz(self) -> tuple[int, str]:
        """/readyz's status and text; (0, why) while nothing answers."""
        url = f"http://127.0.0.1:{self.metrics_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=DEADLINE) as answer:
                return int(answer.status), answer.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except OSError as err:
            return 0, str(err)

    def wait_ready(self, timeout: float = DEADLINE) -> bool:
        return self.wait_for(lambda: self.readyz()[0] == 200, timeout)

    def kubelet(self) -> DRAKubelet:
        """The kubelet's client of the service socket (``async with`` it)."""
        return DRAKubelet(self.service_socket)

    def prepare(self, claims: Sequence[Claim]) -> dict[str, Prepared]:
        """NodePrepareResources as the kubelet calls it, from this thread."""

        async def call() -> dict[str, Prepared]:
            async with self.kubelet() as kubelet:
                return await kubelet.prepare(claims)

        return asyncio.run(call())

    def unprepare(self, claims: Sequence[Claim]) -> dict[str, str]:
        async def call() -> dict[str, str]:
            async with self.kubelet() as kubelet:
                return await kubelet.unprepare(claims)

        return asyncio.run(call())

    def terminate(self, timeout: float = DEADLINE) -> int:
        """SIGTERM and the exit code (SIGKILL if it outlives ``timeout``)."""
        return self._end(signal.SIGTERM, timeout)

    def kill(self) -> int:
        return self._end(signal.SIGKILL, DEADLINE)

    def _end(self, signum: int, timeout: float) -> int:
        if self.alive:
            self.process.send_signal(signum)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(DEADLINE)

    def describe(self) -> str:
        """The exit state and the log's tail, for an assertion's message."""
        state = "running" if self.alive else f"exited {self.process.returncode}"
        return f"daemon {state}; log:\n" + "\n".join(self.log_lines()[-40:])


def serve_command(
    node: DraNode,
    kubeconfig: Path,
    name: str,
    metrics_port: int,
    args: Sequence[str],
    *,
    mode: str = "dra",
) -> list[str]:
    """The command line of ``serve`` in DRA mode (or ``mode``) with every path on ``node``."""
    return [
        sys.executable, "-m", "kae_deviceplugin", "serve", "--mode", mode,
        "--node-name", name, "--kubeconfig", str(kubeconfig),
        "--sysfs-root", str(node.root / "sys"), "--dev-root", str(node.root / "dev"),
        "--kubelet-root", str(node.kubelet_root), "--cdi-dir", str(node.cdi_dir),
        "--state-dir", str(node.workdir / "state"), "--nfd-features-file", "",
        "--metrics-address", f"127.0.0.1:{metrics_port}", "--scan-interval", "200ms",
        *args,
    ]  # fmt: skip


@contextlib.contextmanager
def dra_process(
    node: DraNode,
    api: HttpApiServer,
    *,
    name: str = NODE,
    pod_uid: str | None = None,
    args: Sequence[str] = (),
    tag: str | None = None,
    mode: str = "dra",
) -> Iterator[DraProcess]:
    """``serve --mode dra`` (or ``mode``) for node ``name`` on ``node``, talking to ``api``;
    SIGTERM (then SIGKILL) when the block ends. ``args`` are more flags; ``tag`` names its log
    and kubeconfig (default: the pod UID, else "main")."""
    tag = tag or pod_uid or "main"
    kubeconfig = api.kubeconfig(node.workdir / f"kubeconfig-{tag}")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in UNSET and not k.startswith("KAE_DP_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if pod_uid is not None:
        env["POD_UID"] = pod_uid
    log_path = node.workdir / f"serve-{tag}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            serve_command(node, kubeconfig, name, port, args, mode=mode),
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
        )  # fmt: skip
    daemon = DraProcess(node, process, log_path, port, pod_uid)
    try:
        yield daemon
    finally:
        daemon.terminate()


def owner_uids(slices: Sequence[dict[str, Any]]) -> set[str]:
    """The UIDs of the Nodes that own ``slices``."""
    return {o["uid"] for s in slices for o in s["metadata"].get("ownerReferences", [])}


def device_names(slices: Sequence[dict[str, Any]]) -> set[str]:
    return {d["name"] for s in slices for d in s["spec"].get("devices", [])}
