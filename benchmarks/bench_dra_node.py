"""The DRA driver (``serve --mode dra``) as a process of its own, at rest, for the resident rows.

It runs at its defaults but for paths (the tree, a kubelet root, the CDI, state and NFD files in
a temporary directory), its node name and the metrics address, against the tests' HTTP API
server (tests/support/http_apiserver.py: real HTTP, a token user in a kubeconfig file), one
server in the benchmark's process for every driver. The benchmark plays the kubelet's plugin
watcher: it finds the registration socket, asks GetInfo and reports the registration, as the
kubelet does; the driver is at rest once its ResourceSlices are in the API. Nothing changes
after that: no claim, no device change.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from bench_mode import TICKS, Mode
from bench_node import DEADLINE, Tree, build, free_port, scratch, stop

from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2 as reg_pb
from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from kae_deviceplugin.dra.api import socket_names
from kae_deviceplugin.kubelet.pluginwatcher import registry_dir

if TYPE_CHECKING:
    from tests.support.http_apiserver import HttpApiServer

REPO = Path(__file__).resolve().parents[1]
# What the driver must not inherit: a proxy would take the loopback API server's traffic, and
# these would override the flags given here.
UNSET = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
         "POD_UID", "NODE_NAME")  # fmt: skip
_names = itertools.count(1)


@contextmanager
def api_server() -> Iterator[HttpApiServer]:
    """The tests' HTTP API server, started in this process; stopped on exit."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # it lives with the tests; this script runs from benchmarks/
    from tests.support.http_apiserver import HttpApiServer

    with HttpApiServer() as server:
        yield server


@dataclass
class DraNode:
    """A ``serve --mode dra`` process publishing ``devices`` devices of its tree."""

    name: str
    devices: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid


def dra_command(root: Path, work: Path, name: str, kubeconfig: Path) -> list[str]:
    return [
        sys.executable, "-m", "kae_deviceplugin", "serve", "--mode", "dra",
        "--node-name", name, "--kubeconfig", str(kubeconfig),
        "--sysfs-root", str(root / "sys"), "--dev-root", str(root / "dev"),
        "--kubelet-root", str(work / "kubelet"), "--cdi-dir", str(work / "cdi"),
        "--state-dir", str(work / "state"), "--nfd-features-file", str(work / "nfd-features"),
        "--metrics-address", f"127.0.0.1:{free_port()}",
    ]  # fmt: skip


def register(socket: Path, process: subprocess.Popen[bytes]) -> None:
    """What the kubelet's plugin watcher does with a new socket: GetInfo, then the status."""
    deadline = time.monotonic() + DEADLINE
    while not socket.is_socket():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the DRA driver made no registration socket ({process.poll()})")
        time.sleep(0.02)
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = reg_grpc.RegistrationStub(channel)
        stub.GetInfo(reg_pb.InfoRequest(), timeout=DEADLINE)
        status = reg_pb.RegistrationStatus(plugin_registered=True)
        stub.NotifyRegistrationStatus(status, timeout=DEADLINE)


def published(api: HttpApiServer, name: str) -> bool:
    return any(s["spec"].get("nodeName") == name for s in api.slices())


@contextmanager
def dra_served(api: HttpApiServer, tree: Tree, mode: Mode = TICKS) -> Iterator[DraNode]:
    """Build ``tree``, start the driver on it in ``mode`` against ``api``, register it and wait
    for its slices; stop it on exit."""
    with scratch("kaedra") as tree_dir, scratch("kd", memory=False) as work:
        inventory = build(tree_dir, tree)
        (work / "kubelet").mkdir()
        name = f"bench-dra-{next(_names)}"
        api.seed_node(name)
        kubeconfig = api.kubeconfig(work / "kubeconfig")
        command, env = mode.command(dra_command(tree_dir, work, name, kubeconfig), tree_dir)
        env = {k: v for k, v in env.items() if k not in UNSET and not k.startswith("KAE_DP_")}
        log = work / "dra.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
        node = DraNode(name, len(inventory), process, log)
        try:
            register(registry_dir(work / "kubelet") / socket_names(None)[0], process)
            if not api.wait_for(lambda: published(api, name) or process.poll() is not None, 30):
                raise RuntimeError("the DRA driver published no ResourceSlice in 30 s")
            if process.poll() is not None:
                tail = log.read_text(errors="replace").splitlines()[-5:]
                raise RuntimeError(f"the DRA driver exited {process.returncode}: {tail}")
            yield node
        finally:
            stop(process)


def environment_ok() -> str | None:
    """Why the DRA rows cannot run here (no tests/ beside benchmarks/), or None."""
    support = REPO / "tests" / "support" / "http_apiserver.py"
    return None if support.is_file() else f"n/a (needs {support.relative_to(REPO)})"
