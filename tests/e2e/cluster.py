"""Helpers of the end-to-end tests: the cluster scripts/cluster/up started, fixture trees with real
device nodes, and the plugin run as a host process through its CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.e2e.stack import Stack

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPTS = REPO / "scripts" / "cluster"
FIXTURES = REPO / "sysfs_fixtures"
PREFIX = "openfuyao.com/kae."
ENGINES = {"hisi_hpre": "hpre", "hisi_sec2": "sec", "hisi_zip": "zip"}
EXPORTS = (
    "KUBECONFIG",
    "KAE_E2E_KUBELET_ROOT",
    "KAE_E2E_IMAGE",
    "KAE_E2E_NODE",
    "KAE_E2E_BIN",
)

T = TypeVar("T")


class Timeout(AssertionError):
    """A condition did not hold before its deadline."""


def wait_until(
    what: str, probe: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.2
) -> T:
    """Poll `probe` until it returns something other than None/False, or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = probe()
        except (subprocess.CalledProcessError, OSError, ValueError, KeyError) as exc:
            value, last = None, exc
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            raise Timeout(f"{what}: not within {timeout:.0f}s (last error: {last})")
        time.sleep(interval)


def parse_exports(text: str) -> dict[str, str]:
    """The `export NAME=VALUE` lines of scripts/cluster/up's output."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            name, _, value = line[len("export ") :].partition("=")
            found[name] = value
    return found


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Cluster:
    """The running single-node cluster, as the exports of scripts/cluster/up describe it."""

    kubeconfig: str
    kubelet_root: Path
    image: str
    node: str
    bin: Path
    stack: Stack = field(default_factory=Stack)
    state: Path = Path("/var/tmp/kae-e2e")

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Cluster:
        """Build from the five exports (KeyError if one is missing); the stack and the state
        directory from up's other exports, when there."""
        kubelet_root = Path(env["KAE_E2E_KUBELET_ROOT"])
        return cls(
            kubeconfig=env["KUBECONFIG"],
            kubelet_root=kubelet_root,
            image=env["KAE_E2E_IMAGE"],
            node=env["KAE_E2E_NODE"],
            bin=Path(env["KAE_E2E_BIN"]),
            stack=Stack.from_env(env),
            state=Path(env.get("KAE_E2E_STATE") or kubelet_root.parent),
        )

    @property
    def runtime_config(self) -> Path:
        """containerd's config file, which up writes (and the DRA driver reads for CDI)."""
        return self.state / "containerd" / "config.toml"

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        """Run kubectl against the cluster and return its stdout."""
        proc = subprocess.run(
            [str(self.bin / "kubectl"), "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(
                proc.returncode, proc.args, proc.stdout, proc.stderr
            )
        return proc.stdout

    def get(self, *args: str) -> dict[str, Any]:
        """`kubectl get ... -o json` as a dict."""
        obj: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json"))
        return obj

    def node_resources(self) -> tuple[dict[str, int], dict[str, int]]:
        """Capacity and allocatable of the KAE resources, by engine (absent counts as 0)."""
        status = self.get("node", self.node)["status"]

        def pick(section: dict[str, str]) -> dict[str, int]:
            return {e: int(section.get(PREFIX + e, "0")) for e in ENGINES.values()}

        return pick(status.get("capacity", {})), pick(status.get("allocatable", {}))

    def wait_resources(
        self,
        capacity: dict[str, int] | None = None,
        allocatable: dict[str, int] | None = None,
        timeout: float = 60.0,
    ) -> None:
        """Wait until the node shows these capacity/allocatable counts for the KAE resources."""

        def probe() -> bool:
            cap, alloc = self.node_resources()
            return (capacity is None or cap == capacity) and (
                allocatable is None or alloc == allocatable
            )

        try:
            wait_until("node KAE resources", probe, timeout)
        except Timeout as exc:
            cap, alloc = self.node_resources()
            raise Timeout(
                f"{exc}; wanted capacity={capacity} allocatable={allocatable}, "
                f"node has capacity={cap} allocatable={alloc}"
            ) from None

    def component_pid(self, name: str) -> int:
        """The PID scripts/cluster/up recorded for one of its components (kube-apiserver, ...)."""
        return int((self.state / "pids" / f"{name}.pid").read_text())

    def crictl(self, *args: str) -> str:
        """Run crictl against the cluster's containerd; its stdout."""
        sock = self.state / "containerd" / "containerd.sock"
        return subprocess.run(
            [str(self.bin / "crictl"), "--runtime-endpoint", f"unix://{sock}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout

    def node_ready(self) -> bool:
        """The node's Ready condition is True."""
        conditions = self.get("node", self.node)["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def restart_kubelet(self) -> None:
        """Restart the kubelet with its own command line (scripts/cluster/restart-kubelet)."""
        subprocess.run([str(CLUSTER_SCRIPTS / "restart-kubelet")], check=True, timeout=60)

    def apply(self, manifest: dict[str, Any]) -> None:
        """kubectl apply of one object."""
        self.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))

    def delete_pod(self, name: str, timeout: float = 60.0) -> None:
        """Delete a pod and wait until it is gone from the API."""
        self.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=false")
        wait_until(
            f"pod {name} gone",
            lambda: not self.kubectl("get", "pod", name, "--ignore-not-found", "-o", "name"),
            timeout,
        )


@dataclass
class FixtureTree:
    """A copy of a checked-in fixture tree whose dev/ holds real character devices."""

    root: Path

    @property
    def sys(self) -> Path:
        """The tree's sysfs root."""
        return self.root / "sys"

    @property
    def dev(self) -> Path:
        """The tree's dev root."""
        return self.root / "dev"

    @classmethod
    def copy(cls, name: str, dest: Path) -> FixtureTree:
        """Copy fixture `name` under `dest` (symlinks kept) and mknod its device nodes."""
        root = dest / name
        subprocess.run(["cp", "-a", str(FIXTURES / name), str(root)], check=True)
        tree = cls(root)
        for node in sorted(tree.dev.iterdir()):
            major, minor = tree.major_minor(node.name)
            node.unlink()
            os.mknod(node, 0o666 | 0o020000, os.makedev(major, minor))
        return tree

    def major_minor(self, name: str) -> tuple[int, int]:
        """The device number sysfs gives for class device `name`."""
        text = (self.sys / "class" / "uacce" / name / "dev").read_text().strip()
        major, _, minor = text.partition(":")
        return int(major), int(minor)

    def names(self) -> list[str]:
        """The class devices listed in sys/class/uacce."""
        return sorted(p.name for p in (self.sys / "class" / "uacce").iterdir())

    def counts(self, healthy_only: bool = False) -> dict[str, int]:
        """Devices per engine (optionally only those whose isolate and dev_state read healthy)."""
        out = dict.fromkeys(ENGINES.values(), 0)
        for name in self.names():
            engine = ENGINES[name.rsplit("-", 1)[0]]
            if healthy_only and not self.healthy(name):
                continue
            out[engine] += 1
        return out

    def attr(self, name: str, attr: str) -> Path:
        """Path of one attribute of class device `name` (through the class link)."""
        return self.sys / "class" / "uacce" / name / attr

    def healthy(self, name: str) -> bool:
        """isolate reads 0 and dev_state (where present) is not negative."""
        isolate = self.attr(name, "isolate")
        if isolate.exists() and isolate.read_text().strip() not in ("", "0"):
            return False
        state = self.attr(name, "dev_state")
        return not (state.exists() and state.read_text().strip().startswith("-"))

    def pci_address(self, name: str) -> str:
        """The PCI function the class device belongs to."""
        return (self.sys / "class" / "uacce" / name / "device").resolve().name

    def remove(self, name: str) -> None:
        """Remove a device the way the kernel does as the plugin sees it: its class link goes."""
        (self.sys / "class" / "uacce" / name).unlink()


@dataclass
class Plugin:
    """`kae-deviceplugin serve` as a host process."""

    args: list[str]
    log: Path
    metrics_port: int
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    def start(self) -> None:
        """Start the daemon (log appended to self.log)."""
        assert self.proc is None or self.proc.poll() is not None
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(
                self.args,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
            )

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM by PID, SIGKILL after the deadline."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)

    def restart(self) -> None:
        """Stop, then start again with the same arguments."""
        self.stop()
        self.start()

    def get(self, path: str) -> str:
        """GET one of the daemon's HTTP endpoints (metrics, /allocations, /readyz)."""
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            body: bytes = resp.read()
            return body.decode()

    def readyz(self) -> tuple[int, str]:
        """/readyz's status and body (503 names what is missing)."""
        try:
            return 200, self.get("/readyz")
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")

    def ready(self) -> bool:
        """/readyz answers 200."""
        try:
            self.get("/readyz")
        except OSError:
            return False
        return True

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until /readyz says every resource is registered and streaming."""

        def probe() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"plugin exited {self.proc.returncode}:\n{self.log_text()}")
            return self.ready()

        wait_until("plugin /readyz", probe, timeout)

    def log_text(self) -> str:
        """What the daemon logged so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def plugin_exe() -> str:
    """The host's `kae-deviceplugin` (PATH first, else the repository's venv)."""
    return shutil.which("kae-deviceplugin") or str(REPO / ".venv" / "bin" / "kae-deviceplugin")


def e2e_required() -> bool:
    """In CI (CI=true) or with KAE_REQUIRE_E2E=1 an e2e test that cannot run is an error."""
    return os.environ.get("CI") == "true" or os.environ.get("KAE_REQUIRE_E2E") == "1"


def make_plugin(
    cluster: Cluster,
    tree: FixtureTree,
    workdir: Path,
    registration: str,
    *,
    extra: list[str] | None = None,
) -> Plugin:
    """A daemon serving `tree` to the cluster's kubelet (not started)."""
    exe = plugin_exe()
    port = free_port()
    state = workdir / "state"
    state.mkdir(parents=True, exist_ok=True)
    args = [
        exe,
        "serve",
        "--sysfs-root",
        str(tree.sys),
        "--dev-root",
        str(tree.dev),
        "--kubelet-root",
        str(cluster.kubelet_root),
        "--registration",
        registration,
        "--metrics-address",
        f"127.0.0.1:{port}",
        "--state-dir",
        str(state),
        "--nfd-features-file",
        "",
        "--cdi-dir",
        str(workdir / "cdi"),
        "--log-level",
        "debug",
    ]
    if registration == "kubelet-socket":
        args += ["--device-plugin-dir", str(cluster.kubelet_root / "device-plugins")]
    return Plugin(args=args + list(extra or []), log=workdir / "plugin.log", metrics_port=port)


def tail(path: Path, lines: int = 30) -> str:
    """The last lines of a log file, for failure messages."""
    if not path.exists():
        return f"({path} missing)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
