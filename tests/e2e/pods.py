"""Pods for the e2e tests: manifests, waiting for them, and reading what their container saw."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.e2e.cluster import PREFIX, Cluster, FixtureTree, Timeout, wait_until

# What the container reports, then it sleeps until deleted. Every /sys/class/uacce entry is read
# as UADK reads it: `algorithms`, then `device/numa_node`.
REPORT = r"""
echo "DEV $(ls /dev | grep '^hisi_' | tr '\n' ' ')"
env | grep '^KAE_' | sort | sed 's/^/ENV /'
for e in $(ls /sys/class/uacce 2>/dev/null); do
  if a=$(cat /sys/class/uacce/$e/algorithms 2>/dev/null); then
    echo "READ $e $(cat /sys/class/uacce/$e/device/numa_node 2>&1) $(echo $a | tr ' ' ,)"
  else
    echo "DANGLES $e"
  fi
done
echo END
exec sleep 3600
"""

FAILED_WAITING = {
    "CreateContainerError",
    "CreateContainerConfigError",
    "RunContainerError",
    "ErrImageNeverPull",
    "InvalidImageName",
    "StartError",
}


class PodFailed(AssertionError):
    """The runtime refused to create or start the pod's container."""


def manifest(
    cluster: Cluster,
    name: str,
    limits: dict[str, int],
    *,
    script: str = REPORT,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A host-network pod in `default` running `script` (REPORT unless told) with these KAE
    limits (engine -> count)."""
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "hostNetwork": True,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": cluster.image,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", script],
                    "resources": {"limits": {PREFIX + e: str(n) for e, n in limits.items()}},
                }
            ],
        },
    }


def pod_state(cluster: Cluster, name: str) -> str | None:
    """'Running' when the container runs; raises PodFailed when the runtime refused it."""
    pod = cluster.get("pod", name)
    status = pod.get("status", {})
    for cs in status.get("containerStatuses", []):
        state = cs.get("state", {})
        if "running" in state:
            return "Running"
        waiting = state.get("waiting", {})
        if waiting.get("reason") in FAILED_WAITING:
            raise PodFailed(f"pod {name}: {waiting.get('reason')}: {waiting.get('message')}")
        if "terminated" in state:
            raise PodFailed(f"pod {name} terminated: {state['terminated']}")
    if status.get("phase") == "Failed":
        raise PodFailed(f"pod {name} failed: {status.get('message')}")
    return None


def wait_running(cluster: Cluster, name: str, timeout: float = 90.0) -> None:
    """Wait until the pod's container runs; fail at once when the runtime refuses it."""
    try:
        wait_until(f"pod {name} running", lambda: pod_state(cluster, name), timeout)
    except Timeout:
        events = "\n".join(iter_events(cluster, name))
        raise Timeout(f"pod {name} not running within {timeout:.0f}s; events:\n{events}") from None


def iter_events(cluster: Cluster, name: str) -> Iterator[str]:
    """`reason: message` of the events about one pod."""
    events = cluster.get(
        "events", "-n", "default", "--field-selector", f"involvedObject.name={name}"
    )
    for item in events.get("items", []):
        yield f"{item.get('reason')}: {item.get('message')}"


@dataclass
class Report:
    """What the container saw."""

    dev: set[str]
    env: dict[str, str]
    readable: dict[str, str]  # uacce entry -> its device/numa_node
    dangling: set[str]


def read_report(cluster: Cluster, name: str, timeout: float = 60.0) -> Report:
    """Wait for the container's report (its log up to END) and parse it."""

    def logs() -> str | None:
        text = cluster.kubectl("logs", name, "-n", "default")
        return text if "\nEND" in "\n" + text else None

    text = wait_until(f"report of pod {name}", logs, timeout)
    dev: set[str] = set()
    env: dict[str, str] = {}
    readable: dict[str, str] = {}
    dangling: set[str] = set()
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "DEV":
            dev = set(rest.split())
        elif kind == "ENV":
            key, _, value = rest.partition("=")
            env[key] = value
        elif kind == "READ":
            entry, numa, *_ = rest.split()
            readable[entry] = numa
        elif kind == "DANGLES":
            dangling.add(rest.strip())
    return Report(dev=dev, env=env, readable=readable, dangling=dangling)


def run_reporting(cluster: Cluster, name: str, limits: dict[str, int]) -> Report:
    """Create the REPORT pod `name` with these limits, wait until it runs and return what its
    container saw (the caller deletes it)."""
    cluster.apply(manifest(cluster, name, limits))
    wait_running(cluster, name)
    return read_report(cluster, name)


def allocated_names(report: Report) -> set[str]:
    """The uacce names the KAE_<ENGINE>_DEVICES variables give the container."""
    names: set[str] = set()
    for key, value in report.env.items():
        if key.endswith("_DEVICES"):
            names.update(v for v in value.replace(";", ",").split(",") if v)
    return names


def assert_sees_only_its_devices(report: Report, tree: FixtureTree) -> set[str]:
    """Two devices given (one /dev node each), and through /sys/class/uacce exactly those
    readable, each with the tree's device/numa_node; every other entry dangles. Their names."""
    names = allocated_names(report)
    assert report.dev == names and len(names) == 2, report
    assert set(report.readable) == names, report
    assert report.dangling == set(tree.names()) - names, report
    for name in names:
        numa = (tree.sys / "class" / "uacce" / name / "device" / "numa_node").read_text()
        assert report.readable[name] == numa.strip(), report
    return names


def pod_resources(cluster: Cluster, plugin_exe: str) -> list[dict[str, Any]]:
    """The kubelet's pod-resources answer for the KAE resources, through the plugin's CLI
    asking the kubelet's socket directly (the daemon endpoint given is closed)."""
    out = subprocess.run(
        [
            plugin_exe,
            "list",
            "--allocations",
            "-o",
            "json",
            "--endpoint",
            "http://127.0.0.1:1",
            "--pod-resources-socket",
            str(cluster.kubelet_root / "pod-resources" / "kubelet.sock"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    data: list[dict[str, Any]] = json.loads(out)
    return data
