"""A DRA daemon's endpoint as monitoring meets it: the chart's alert rules against its own scrape
(silent on a healthy DRA node, KaeResourceNotRegistered for the driver while the kubelet has not
registered it), and /allocations.

The daemon runs in-process in DRA mode (the real front end, scan loop and HTTP endpoint; an
in-memory API server; the kubelet's registration done over the real registration socket, as
the plugin watcher does it). Its scrape becomes promtool's input series and the chart's rendered
PrometheusRule is evaluated by `promtool test rules` (Debian's package; skipped without it, or
without Helm 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import math
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2 as reg_pb
from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from kae_deviceplugin.apiserver.paced import PacedApi
from kae_deviceplugin.apiserver.seam import NODES
from kae_deviceplugin.cli.demo import demo_settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.daemon.scanloop import scan_loop_for
from kae_deviceplugin.daemon.supervisor import Daemon, Heartbeats
from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.frontend import DraFrontEnd
from kae_deviceplugin.observability.http import EndpointTask
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.deploy.test_deploy import CHART, helm_run
from tests.support.fake_apiserver import FakeApiServer
from tests.support.harness import DEADLINE, short_tmpdir

PROMTOOL = shutil.which("promtool")
NODE = "worker-1"

NEEDS_PROMTOOL = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)"
)


@dataclasses.dataclass
class DraNode:
    """A DRA daemon serving on a thread, and where to reach it."""

    daemon: Daemon[DraFrontEnd]
    endpoint: EndpointTask

    @property
    def base_url(self) -> str:
        assert self.endpoint.bound.wait(DEADLINE), "the endpoint never listened"
        return f"http://127.0.0.1:{self.endpoint.port}"

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=DEADLINE) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def register_with_the_kubelet(self) -> None:
        """What the plugin watcher does with a new DRAPlugin socket: GetInfo, then the status."""
        socket = self.daemon.front.registration_socket
        assert wait_for(socket.is_socket), f"no registration socket {socket}"
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info = stub.GetInfo(reg_pb.InfoRequest(), timeout=DEADLINE)
            assert (info.type, info.name) == ("DRAPlugin", DRIVER)
            status = reg_pb.RegistrationStatus(plugin_registered=True)
            stub.NotifyRegistrationStatus(status, timeout=DEADLINE)


def wait_for(check: Any, timeout: float = DEADLINE) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@contextlib.contextmanager
def dra_daemon() -> Iterator[DraNode]:
    """The DRA daemon on kunpeng920-2p, its API server holding the Node, serving /metrics."""
    with short_tmpdir() as workdir:
        TREES["kunpeng920-2p"].build(workdir / "node")
        settings = dataclasses.replace(
            demo_settings(workdir),
            mode="dra",
            node_name=NODE,
            cdi_dir=workdir / "cdi",
            metrics_address="127.0.0.1:0",
        )
        api = FakeApiServer()
        asyncio.run(api.create(NODES, {"metadata": {"name": NODE}}))
        files = ContainerFiles()
        front = DraFrontEnd(settings, PacedApi(api), NODE, files)
        heartbeats = Heartbeats()
        scan = scan_loop_for(
            settings,
            Counters(),
            front.reconcile,
            files,
            tick=heartbeats.ticker("scan"),
            source=None,
        )
        daemon = Daemon(scan, front, heartbeats, asyncio.Event())
        endpoint = EndpointTask(max_age=0.0)
        daemon.add_task(functools.partial(endpoint.run, daemon))
        codes: list[int] = []
        thread = threading.Thread(
            target=lambda: codes.append(asyncio.run(daemon.run(handle_signals=False)))
        )
        thread.start()
        try:
            yield DraNode(daemon, endpoint)
        finally:
            daemon.call_threadsafe(daemon.request_stop)
            thread.join(DEADLINE)
            assert codes == [0], "the daemon failed"


def input_series(scrape: str) -> list[dict[str, str]]:
    """Every sample of a scrape as a promtool series, constant over the test's range."""
    series = []
    for family in text_string_to_metric_families(scrape):
        for sample in family.samples:
            if not math.isfinite(sample.value):
                continue
            labels = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(sample.labels.items()))
            series.append(
                {"series": f"{sample.name}{{{labels}}}", "values": f"{sample.value!r}+0x30"}
            )
    return series


def chart_alerts(workdir: Path) -> tuple[Path, dict[str, str]]:
    """The chart's PrometheusRule in DRA mode as a rule file, and each alert's expression."""
    out = helm_run(
        "template", "kae", str(CHART), "--show-only", "templates/prometheusrule.yaml",
        "--set", "metrics.prometheusRule.enabled=true", "--set", "dra.enabled=true",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    groups = yaml.safe_load(out.stdout)["spec"]["groups"]
    path = workdir / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    return path, {r["alert"]: r["expr"] for g in groups for r in g["rules"]}


def promtool_test(workdir: Path, rules: Path, test: dict[str, Any]) -> None:
    """Run one promtool rule test case; the assertion shows promtool's own report."""
    assert PROMTOOL is not None
    spec = workdir / "test.yaml"
    case = {"interval": "1m", **test}
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "tests": [case]}))
    done = subprocess.run(
        [PROMTOOL, "test", "rules", str(spec)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@NEEDS_PROMTOOL
def test_no_chart_alert_fires_on_a_healthy_dra_node(tmp_path: Path) -> None:
    """Before the kubelet registers the driver its scrape makes KaeResourceNotRegistered's
    expression name the driver (the rule can fail); once registered and published (ready),
    none of the chart's alerts fires for the whole `for` window and beyond."""
    rules, alerts = chart_alerts(tmp_path)
    assert set(alerts) == {
        "KaeDeviceUnhealthy",
        "KaeResourceNotRegistered",
        "KaeAllocationErrors",
        "KaeDeviceGrantUnused",
        "KaeDeviceQueuesOverGrant",
    }
    with dra_daemon() as node:
        assert wait_for(lambda: "ResourceSlices not published" not in node.get("/readyz")[1])
        unregistered = input_series(node.get("/metrics")[1])
        node.register_with_the_kubelet()
        assert wait_for(lambda: node.get("/readyz")[0] == 200), node.get("/readyz")
        healthy = input_series(node.get("/metrics")[1])
    expected = f'kae_resource_registered{{resource="{DRIVER}"}}'
    promtool_test(
        tmp_path,
        rules,
        {
            "input_series": unregistered,
            "promql_expr_test": [
                {
                    "expr": alerts["KaeResourceNotRegistered"],
                    "eval_time": "10m",
                    "exp_samples": [{"labels": expected, "value": 0}],
                }
            ],
        },
    )
    promtool_test(
        tmp_path,
        rules,
        {
            "input_series": healthy,
            "alert_rule_test": [
                {"alertname": name, "eval_time": when, "exp_alerts": []}
                for name in sorted(alerts)
                for when in ("6m", "30m")
            ],
        },
    )


def test_allocations_in_dra_mode_is_an_empty_list_that_points_to_the_claims() -> None:
    """A DRA daemon's /allocations answers 200 with no rows (no device-plugin allocation exists
    there, as the chart README says) and a note naming where claims are shown; not the 503 of a
    pod-resources API the DRA pod does not mount."""
    with dra_daemon() as node:
        status, body = node.get("/allocations")
    assert status == 200, body
    answer = json.loads(body)
    assert answer["allocations"] == [] and "list --mode dra" in answer["note"]


def test_the_api_requests_are_counted_by_verb_from_zero() -> None:
    """kae_apiserver_requests_total: every verb has a series from the start (a rate is never
    absent); once the pool is published, its list, watch and create are counted."""
    with dra_daemon() as node:

        def requests() -> dict[str, float]:
            status, body = node.get("/metrics")
            assert status == 200, body
            return {
                sample.labels["verb"]: sample.value
                for family in text_string_to_metric_families(body)
                if family.name == "kae_apiserver_requests"
                for sample in family.samples
                if sample.name == "kae_apiserver_requests_total"
            }

        assert wait_for(lambda: requests().get("create", 0) >= 1), requests()
        counted = requests()
    assert set(counted) >= {"get", "list", "watch", "create", "update", "patch", "delete"}
    assert counted["list"] >= 1 and counted["watch"] >= 1 and counted["get"] >= 1
