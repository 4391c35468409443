"""The chart on the e2e cluster: the plugin image in containerd, `helm` against the cluster, the
DaemonSet's pod and what it serves.

Shared by tests/e2e/test_helm.py and benchmarks/bench_helm.py."""

from __future__ import annotations

import contextlib
import json
import subprocess
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.cluster import CLUSTER_SCRIPTS, REPO, Cluster, FixtureTree

CHART = REPO / "deploy" / "helm" / "kae-device-plugin"
OPT_OUT_LABEL = "openfuyao.com/kae.deploy.device-plugin"
METRICS_PORT = 9410


def build_plugin_image(timeout: float = 1800) -> Path:
    """scripts/cluster/plugin-image: the OCI archive of the image (built only when its inputs
    changed). Raises CalledProcessError with the script's stderr on failure."""
    proc = subprocess.run(
        [str(CLUSTER_SCRIPTS / "plugin-image")],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout, proc.stderr)
    return Path(proc.stdout.strip().splitlines()[-1])


def archive_image_name(archive: Path) -> str:
    """The image name an OCI archive carries (the name `ctr images import` gives it)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None, f"{archive}: no index.json"
        index = json.load(member)
    name: str = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
    return name


@dataclass
class Ctr:
    """containerd's ctr, in the CRI's k8s.io namespace, at the address scripts/cluster/up uses."""

    cluster: Cluster

    def run(self, *args: str) -> str:
        """Run one ctr command; its stdout."""
        state = self.cluster.kubelet_root.parent  # up's state dir holds kubelet/ and containerd/
        return subprocess.run(
            [
                str(self.cluster.bin / "ctr"),
                "--address",
                str(state / "containerd" / "containerd.sock"),
                "-n",
                "k8s.io",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        ).stdout

    def import_archive(self, archive: Path) -> str:
        """Import an OCI archive; the image's name."""
        self.run("images", "import", str(archive))
        return archive_image_name(archive)

    def tag(self, source: str, target: str) -> None:
        """Give an image a second name (replacing an old one of that name)."""
        self.run("images", "tag", "--force", source, target)

    def remove(self, name: str) -> None:
        """Remove one image name (absent is fine)."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self.run("images", "rm", name)


def split_image(name: str) -> tuple[str, str]:
    """repository, tag of `repo[:port]/path:tag`."""
    repository, _, tag = name.rpartition(":")
    assert repository and "/" not in tag, f"image name without a tag: {name}"
    return repository, tag


def chart_values(cluster: Cluster, tree: FixtureTree, image: str, host_dir: Path) -> dict[str, Any]:
    """Values for the test cluster: the imported image (never pulled), the fixture tree, the
    kubelet's root, and the state and NFD directories under `host_dir` (so nothing lands at the
    chart's default host paths)."""
    repository, tag = split_image(image)
    return {
        "devicePlugin": {"fixtureRoot": str(tree.root)},
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "kubeletRootDir": str(cluster.kubelet_root),
        "config": {"stateDir": str(host_dir / "state")},
        # No NFD here: nothing would set openfuyao.com/kae.present.
        "nfd": {"requireLabel": False, "localFeatures": {"dir": str(host_dir / "features.d")}},
        # Fast readiness, so a new pod is Ready soon after it registers.
        "readinessProbe": {"initialDelaySeconds": 1, "periodSeconds": 1},
    }


@dataclass
class Release:
    """One Helm release of the chart on the cluster."""

    helm: str
    cluster: Cluster
    name: str
    namespace: str

    def run(self, *args: str, timeout: float = 300) -> str:
        """Run helm against the cluster; its stdout (CalledProcessError with stderr on failure)."""
        proc = subprocess.run(
            [self.helm, "--kubeconfig", self.cluster.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(
                proc.returncode, proc.args, proc.stdout, proc.stderr
            )
        return proc.stdout

    def install(self, values: Path) -> None:
        """helm install into a namespace of its own (created), without waiting."""
        self.run(
            "install", self.name, str(CHART), "--namespace", self.namespace,
            "--create-namespace", "--values", str(values),
        )  # fmt: skip

    def upgrade(self, *sets: str) -> None:
        """helm upgrade keeping the installed values, with `--set` overrides."""
        args = ["upgrade", self.name, str(CHART), "--namespace", self.namespace, "--reuse-values"]
        for item in sets:
            args += ["--set", item]
        self.run(*args)

    def uninstall(self) -> None:
        """helm uninstall, waiting until its objects are deleted (absent release is fine)."""
        self.run(
            "uninstall", self.name, "--namespace", self.namespace, "--wait", "--ignore-not-found"
        )

    def installed(self) -> bool:
        """The release exists."""
        out = self.run("list", "--namespace", self.namespace, "--short", "--all")
        return self.name in out.split()

    def pods(self, terminating: bool = False) -> list[dict[str, Any]]:
        """The plugin pods of this release; those being deleted only with `terminating`."""
        items: list[dict[str, Any]] = self.cluster.get(
            "pods", "-n", self.namespace, "-l", f"app.kubernetes.io/instance={self.name}"
        )["items"]
        return [p for p in items if terminating or not p["metadata"].get("deletionTimestamp")]

    def logs(self, lines: int = 40) -> str:
        """The last log lines of the release's plugin pods, probes left out (failure reports)."""
        text = self.cluster.kubectl(
            "logs", "-n", self.namespace, "-l", f"app.kubernetes.io/instance={self.name}",
            "--tail=-1", "--prefix", check=False,
        )  # fmt: skip
        kept = [line for line in text.splitlines() if "GET /" not in line]
        return "\n".join(kept[-lines:])

    def ready_pod(self) -> dict[str, Any] | None:
        """The one plugin pod once it is Ready (None before; AssertionError if several)."""
        pods = self.pods()
        assert len(pods) <= 1, [p["metadata"]["name"] for p in pods]
        if not pods:
            return None
        conditions = pods[0].get("status", {}).get("conditions", [])
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return pods[0] if ready else None


def pod_get(pod: dict[str, Any], path: str) -> str:
    """GET one of the plugin's HTTP endpoints at the pod's IP (reached over the CNI bridge)."""
    url = f"http://{pod['status']['podIP']}:{METRICS_PORT}{path}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        body: bytes = resp.read()
        return body.decode()


def allocated_series(metrics: str) -> list[dict[str, str]]:
    """The labels of every kae_device_allocated sample with a value above 0."""
    rows: list[dict[str, str]] = []
    for family in text_string_to_metric_families(metrics):
        if family.name != "kae_device_allocated":
            continue
        rows += [dict(s.labels) for s in family.samples if s.value > 0]
    return rows
