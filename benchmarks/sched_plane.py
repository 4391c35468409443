"""A private control plane for the scheduling benchmark: etcd, kube-apiserver, kube-scheduler and
kube-controller-manager, no kubelet, no container runtime.

Everything lives in a temporary state directory (data, TLS material, logs) and listens on free
loopback ports, so it never meets the e2e cluster of ``scripts/cluster/up``. TLS as ``up`` makes
it (openssl, an EC CA and a serving certificate for 127.0.0.1); clients prove who they are with a
static token of ``system:masters``. Leaving the ``with`` block stops every process it started (by
pid: SIGTERM, SIGKILL after 10 s) and removes the directory, on an error or Ctrl-C too.

The node lifecycle controller is off: no kubelet renews the nodes' leases, and it would mark every
node unreachable (a NoSchedule taint) after the grace period. The scheduler's and the controller
manager's client rate limits are raised so that they, not their clients, are what is measured.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

CACHE = Path.home() / ".cache" / "kae-e2e"
COMPONENTS = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
VERSION = "v1.37.2"
STOP_GRACE = 10.0
READY_WAIT = 120.0

SCHEDULER_CONFIG = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {{kubeconfig: {kubeconfig}, qps: 5000, burst: 5000}}
leaderElection: {{leaderElect: false}}
"""

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: sched
  cluster: {{server: "{server}", certificate-authority: {ca}}}
users:
- name: admin
  user: {{token: {token}}}
contexts:
- name: sched
  context: {{cluster: sched, user: admin}}
current-context: sched
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def find_bin() -> Path:
    """``$KAE_SCHED_BIN``, else the cached stack of Kubernetes 1.37.2 with a 1.37.2 kubelet
    (scripts/cluster/build writes ``stack`` beside each ``bin``): the default e2e stack."""
    if chosen := os.environ.get("KAE_SCHED_BIN"):
        return Path(chosen)
    for stack in sorted(CACHE.glob("*/stack")):
        lines = set(stack.read_text().split())
        binaries = stack.parent / "bin"
        if {"k8s=1.37.2", "kubelet=1.37.2"} <= lines and all(
            (binaries / c).exists() for c in COMPONENTS
        ):
            return binaries
    raise FileNotFoundError(f"no Kubernetes 1.37.2 binaries under {CACHE}/*/bin")


def version(binaries: Path) -> str:
    done = subprocess.run(
        [str(binaries / "kube-apiserver"), "--version"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip().rsplit(" ", 1)[-1]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(pki: Path) -> None:
    """A CA, a serving certificate for 127.0.0.1 and the service-account key pair."""
    pki.mkdir()
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-days", "2", "-keyout", "ca.key", "-out", "ca.crt",
             "-subj", "/CN=kae-sched-ca", cwd=pki)  # fmt: skip
    (pki / "serving.ext").write_text(
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    _openssl("req", *ec, "-keyout", "serving.key", "-out", "serving.csr",
             "-subj", "/CN=kube-apiserver", cwd=pki)  # fmt: skip
    _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "serving.ext", "-out", "serving.crt",
             cwd=pki)  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


@dataclass
class Plane:
    """The running control plane: where it is, how to reach it, its processes."""

    state: Path
    binaries: Path
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    api_port: int = field(default_factory=free_port)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    etcd_url: str = ""
    scheduler_port: int = 0  # the scheduler's serving port: /metrics

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca(self) -> Path:
        return self.state / "pki" / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "admin.kubeconfig"

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def start(self, name: str, *args: str) -> None:
        log = (self.state / "logs" / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            [str(self.binaries / name), *args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        log.close()

    def stop(self) -> None:
        """SIGTERM every process (the last started first), SIGKILL what is left after 10 s."""
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
                proc.terminate()
        deadline = time.monotonic() + STOP_GRACE
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def pause(self, name: str, paused: bool) -> None:
        """SIGSTOP or SIGCONT one component."""
        self.procs[name].send_signal(signal.SIGSTOP if paused else signal.SIGCONT)

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.state / "logs" / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, name: str, url: str, context: ssl.SSLContext | None) -> None:
        deadline = time.monotonic() + READY_WAIT
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        while True:
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"{name} exited:\n{self.log_tail(name)}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(request, timeout=2, context=context) as answer,
            ):
                if answer.status == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{name} not ready in {READY_WAIT:.0f} s:\n{self.log_tail(name)}"
                )
            time.sleep(0.2)


def _start_etcd(plane: Plane) -> None:
    client, peer = free_port(), free_port()
    plane.start("etcd", "--name", "sched", "--data-dir", str(plane.state / "etcd"),
                "--listen-client-urls", f"http://127.0.0.1:{client}",
                "--advertise-client-urls", f"http://127.0.0.1:{client}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"sched=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync", "--quota-backend-bytes", str(8 << 30))  # fmt: skip
    plane.wait_ready("etcd", f"http://127.0.0.1:{client}/health", None)
    plane.etcd_url = f"http://127.0.0.1:{client}"


def _start_apiserver(plane: Plane, etcd_url: str) -> None:
    pki = plane.state / "pki"
    tokens = plane.state / "tokens.csv"
    tokens.write_text(f'{plane.token},admin,admin,"system:masters"\n')
    plane.start("kube-apiserver", "--etcd-servers", etcd_url,
                "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
                "--secure-port", str(plane.api_port), "--endpoint-reconciler-type", "none",
                "--tls-cert-file", str(pki / "serving.crt"),
                "--tls-private-key-file", str(pki / "serving.key"),
                "--token-auth-file", str(tokens),
                "--service-account-issuer", "https://kubernetes.default.svc",
                "--service-account-key-file", str(pki / "sa.pub"),
                "--service-account-signing-key-file", str(pki / "sa.key"),
                "--service-cluster-ip-range", "10.214.0.0/24",
                "--authorization-mode", "RBAC", "--profiling=true",
                "--max-requests-inflight", "800",
                "--max-mutating-requests-inflight", "400")  # fmt: skip
    context = ssl.create_default_context(cafile=str(plane.ca))
    plane.wait_ready("kube-apiserver", f"{plane.server}/readyz", context)


def _start_controllers(plane: Plane) -> int:
    """The scheduler and the controller manager; the scheduler's serving port (its /metrics)."""
    kubeconfig = str(plane.kubeconfig)
    config = plane.state / "scheduler.yaml"
    config.write_text(SCHEDULER_CONFIG.format(kubeconfig=kubeconfig))
    port = free_port()
    plane.start("kube-scheduler", "--config", str(config), "--bind-address", "127.0.0.1",
                "--secure-port", str(port),
                "--authorization-always-allow-paths", "/healthz,/readyz,/livez,/metrics",
                "--authentication-skip-lookup=true")  # fmt: skip
    pki = plane.state / "pki"
    plane.start("kube-controller-manager", "--kubeconfig", kubeconfig,
                "--secure-port", "0", "--leader-elect=false",
                "--controllers", "*,-node-lifecycle-controller",
                "--kube-api-qps", "1000", "--kube-api-burst", "1000",
                "--service-account-private-key-file", str(pki / "sa.key"),
                "--root-ca-file", str(plane.ca),
                "--use-service-account-credentials=false")  # fmt: skip
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
    plane.wait_ready("kube-scheduler", f"https://127.0.0.1:{port}/readyz", insecure)
    return port


@contextlib.contextmanager
def control_plane(binaries: Path | None = None) -> Iterator[Plane]:
    """Start the four components in a new temporary directory; stop them and remove it after."""
    state = Path(tempfile.mkdtemp(prefix="kae-sched-"))
    plane = Plane(state, binaries or find_bin())
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        (state / "logs").mkdir()
        make_pki(state / "pki")
        plane.kubeconfig.write_text(
            KUBECONFIG.format(server=plane.server, ca=plane.ca, token=plane.token)
        )
        _start_etcd(plane)
        _start_apiserver(plane, plane.etcd_url)
        plane.scheduler_port = _start_controllers(plane)
        yield plane
    finally:
        plane.stop()
        if os.environ.get("KAE_SCHED_KEEP_LOGS"):
            shutil.copytree(state / "logs", os.environ["KAE_SCHED_KEEP_LOGS"], dirs_exist_ok=True)
        shutil.rmtree(state, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
