"""The README's PromQL against a real Prometheus server (Debian's package) scraping the daemon.

Prometheus runs on loopback with a temporary configuration that scrapes the daemon's /metrics
every second; every wait has a deadline. Skipped, saying so, where the binary is missing (CI
installs the Debian package `prometheus`).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from kae_deviceplugin.testing.podresources_emulator import PodResourcesEmulator
from tests.deploy.test_deploy import helm_run
from tests.support.observability_harness import observed_node

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")
DEADLINE = 30.0
HPRE = "openfuyao.com/kae.hpre"

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the prometheus server is not installed (Debian package prometheus); not queried",
)


def readme_queries() -> list[str]:
    """The queries of the README's promql block (each after the comment that explains it)."""
    block = re.search(r"```promql\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert block is not None, "README has no promql block"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


# What the prometheus-operator attaches to a target: our own namespace/pod/container labels
# (the holder of a device, empty while free) must win over these, as honor_labels makes them.
TARGET_LABELS = (
    "{node: node-a, namespace: kae-system, pod: kae-device-plugin-x7k2p, "
    "container: kae-device-plugin}"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def prometheus_scraping(target: str, workdir: Path, rules: Path | None = None) -> Iterator[str]:
    """A Prometheus server scraping ``target`` every second; yields its base URL."""
    assert PROMETHEUS is not None
    config = workdir / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        + (f"rule_files: ['{rules}']\n" if rules else "")
        + "scrape_configs:\n"
        "  - job_name: kae\n"
        "    honor_labels: true\n"
        f"    static_configs: [{{targets: ['{target}'], labels: {TARGET_LABELS}}}]\n"
    )
    port = free_port()
    log = (workdir / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        ready = wait_for(lambda: _get(f"{base}/-/ready") is not None)
        assert ready, (workdir / "prometheus.log").read_text()[-2000:]
        yield base
    finally:
        server.terminate()
        server.wait(timeout=DEADLINE)
        log.close()


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = answer.read()
    except (urllib.error.URLError, OSError):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body


def query(base: str, promql: str) -> list[dict[str, Any]]:
    answer = _get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    assert isinstance(answer, dict) and answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def wait_for(check: Callable[[], Any], timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def test_readme_queries_answer_on_a_real_prometheus(tmp_path: Path) -> None:
    """Who holds which device, free devices per node, and the error rate, before and after an
    error, as a real Prometheus evaluates them on the daemon's scrapes."""
    holders, free, errors = readme_queries()  # the README's order: holders, free, errors
    with (
        observed_node("kunpeng920-2p") as node,
        PodResourcesEmulator(
            node.workdir / "kubelet" / "pod-resources" / "kubelet.sock"
        ) as kubelet_pods,
    ):
        kubelet_pods.set_pods([("shop", "checkout", "tls", HPRE, ["0000:79:00.0"])])
        assert node.wait_registered(3)
        target = node.base_url.removeprefix("http://")
        with prometheus_scraping(target, tmp_path) as prometheus:
            held = wait_for(lambda: query(prometheus, holders))
            assert [(r["metric"]["pod"], r["metric"]["pci_address"]) for r in held] == [
                ("checkout", "0000:79:00.0")
            ]
            assert held[0]["metric"]["namespace"] == "shop"  # ours, not the scrape target's
            per_engine = wait_for(lambda: query(prometheus, free))
            counts = {
                (r["metric"]["node"], r["metric"]["engine"]): r["value"][1] for r in per_engine
            }
            assert counts == {
                ("node-a", "hpre"): "1",
                ("node-a", "sec"): "2",
                ("node-a", "zip"): "2",
            }
            before = wait_for(lambda: query(prometheus, errors))
            assert {r["metric"]["resource"] for r in before} >= {HPRE}  # present before any error
            assert all(float(r["value"][1]) == 0 for r in before)
            with pytest.raises(grpc.RpcError):
                node.kubelet.allocate(HPRE, ["no-such-device"])

            def hpre_errors() -> bool:
                rates = {
                    r["metric"]["resource"]: float(r["value"][1]) for r in query(prometheus, errors)
                }
                return rates.get(HPRE, 0) > 0

            assert wait_for(hpre_errors)


def chart_rules(workdir: Path) -> Path:
    """The chart's PrometheusRule groups as a rule file (skips the test without Helm 3)."""
    chart = REPO / "deploy" / "helm" / "kae-device-plugin"
    out = helm_run(
        "template", "kae", str(chart), "--show-only", "templates/prometheusrule.yaml",
        "--set", "metrics.prometheusRule.enabled=true",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rules = workdir / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": yaml.safe_load(out.stdout)["spec"]["groups"]}))
    return rules


def test_chart_alerts_go_pending_on_a_node_with_faults(tmp_path: Path) -> None:
    """The chart's rules, loaded by a real Prometheus: an Unhealthy device and a resource the
    kubelet never registered make their alerts pending (they fire after `for`)."""
    rules = chart_rules(tmp_path)
    with observed_node("faults", start_kubelet=False) as node:
        target = node.base_url.removeprefix("http://")
        with prometheus_scraping(target, tmp_path, rules) as prometheus:

            def pending() -> set[tuple[str, str]]:
                answer = _get(f"{prometheus}/api/v1/alerts")
                alerts = answer["data"]["alerts"] if isinstance(answer, dict) else []
                return {
                    (
                        a["labels"]["alertname"],
                        a["labels"].get("device") or a["labels"].get("resource", ""),
                    )
                    for a in alerts
                    if a["state"] == "pending"
                }

            want = {
                ("KaeDeviceUnhealthy", "hisi_hpre-2"),
                ("KaeDeviceUnhealthy", "hisi_zip-4"),
                ("KaeResourceNotRegistered", HPRE),
            }
            assert wait_for(lambda: want <= pending()), pending()
            assert ("KaeDeviceUnhealthy", "hisi_zip-5") not in pending()  # the healthy one
