"""The chart's Grafana dashboard: a ConfigMap for Grafana's sidecar (off by default), and every
panel's PromQL answered by a real Prometheus scraping a device-plugin daemon and a DRA daemon.

The device-plugin node (kunpeng920-2p, ``node-a``) has a pod holding an HPRE; the DRA node
(the ``faults`` tree, ``node-b``, ZIP shared) has unhealthy devices and a prepared share of 8
queues. Skipped, saying so, without the prometheus binary (CI installs Debian's package).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from kae_deviceplugin.testing.podresources_emulator import PodResourcesEmulator
from tests.deploy.test_deploy import CHART, helm_run
from tests.observability.test_prometheus_server import (
    PROMETHEUS,
    _get,
    free_port,
    query,
    wait_for,
)
from tests.support.dra_claims import Result, claim_object
from tests.support.dra_kubelet import Claim
from tests.support.dra_process import NODE, device_names, dra_node, dra_process
from tests.support.http_apiserver import HttpApiServer
from tests.support.observability_harness import observed_node

DASHBOARD = CHART / "dashboards" / "kae-devices.json"
ZIP_SHARED = "zip-0000-b5-00-0"  # the faults tree's one healthy device
HPRE = "openfuyao.com/kae.hpre"
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="the prometheus server is not installed (Debian package prometheus)"
)


def panel_queries() -> dict[str, list[str]]:
    """Each panel's title and the PromQL of its targets, from the file the chart ships."""
    dashboard = json.loads(DASHBOARD.read_text())
    return {p["title"]: [t["expr"] for t in p["targets"]] for p in dashboard["panels"]}


def rendered_dashboards(*sets: str) -> list[dict[str, Any]]:
    out = helm_run("template", "kae", str(CHART), *[f"--set={s}" for s in sets])
    assert out.returncode == 0, out.stderr
    return [
        d
        for d in yaml.safe_load_all(out.stdout)
        if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")
    ]


def test_the_chart_ships_the_dashboard_for_grafanas_sidecar_off_by_default() -> None:
    """Off by default; on, one ConfigMap labelled grafana_dashboard: "1" holding the file, in
    the namespace and with the annotations asked for."""
    assert rendered_dashboards() == []
    (on,) = rendered_dashboards(
        "dashboard.enabled=true", "dashboard.namespace=monitoring",
        "dashboard.annotations.grafana_folder=KAE",
    )  # fmt: skip
    assert on["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert on["metadata"]["namespace"] == "monitoring"
    assert on["metadata"]["annotations"] == {"grafana_folder": "KAE"}
    assert json.loads(on["data"]["kae-devices.json"]) == json.loads(DASHBOARD.read_text())


def test_the_dashboard_has_the_panels_the_issue_asks_for() -> None:
    """Devices per node and engine, health over time, who holds what, queues in use against
    claimed, and writes; each query reads the daemon's own series and no Grafana variable
    (so Prometheus runs it as written)."""
    titles = list(panel_queries())
    assert titles == [
        "Devices per node and engine",
        "Health over time",
        "Unhealthy devices and why",
        "Who holds what (device plugin)",
        "Queues in use against claimed (shared DRA devices)",
        "API writes (DRA)",
    ]
    for expressions in panel_queries().values():
        assert all("kae_" in e and "$" not in e for e in expressions)


@contextmanager
def prometheus_scraping_nodes(targets: dict[str, str], workdir: Path) -> Iterator[str]:
    """A Prometheus scraping each target every second, labelled with its node (what the chart's
    ServiceMonitor does); yields its base URL."""
    import subprocess

    assert PROMETHEUS is not None
    static = [{"targets": [t], "labels": {"node": n}} for n, t in targets.items()]
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "kae", "honor_labels": True, "static_configs": static}],
    }))  # fmt: skip
    port = free_port()
    with (workdir / "prometheus.log").open("w") as log:
        server = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            assert wait_for(lambda: _get(f"{base}/-/ready") is not None), "prometheus not ready"
            yield base
        finally:
            server.terminate()
            server.wait(timeout=30)


@contextmanager
def dra_node_with_a_share(api: HttpApiServer) -> Iterator[str]:
    """The faults tree as a DRA node sharing ZIP, with a prepared claim of 8 queues; yields
    its metrics address."""
    api.seed_node(NODE)
    share = Result("zip", ZIP_SHARED, NODE, share_id=str(uuid.uuid4()), consumed_queues="8")
    claim = api.seed("resourceclaims", claim_object("shop", "zip-share", [share]))
    with (
        dra_node("faults") as node,
        dra_process(node, api, args=["--shared-engines", "zip"]) as dra,
    ):
        dra.register()
        assert api.wait_for(lambda: ZIP_SHARED in device_names(api.slices()), 10), dra.describe()
        ref = Claim("shop", "zip-share", claim["metadata"]["uid"])
        assert dra.prepare([ref])[ref.uid].error == ""
        yield f"127.0.0.1:{dra.metrics_port}"


def _rows(base: str, expression: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = wait_for(lambda: query(base, expression))
    assert found, f"no data for {expression}"
    return found


@needs_prometheus
def test_every_panel_answers_on_a_real_prometheus(tmp_path: Path) -> None:
    """Each query of each panel returns series from the two daemons' scrapes, with the
    figures the nodes have."""
    queries = panel_queries()
    with (
        HttpApiServer() as api,
        dra_node_with_a_share(api) as dra_target,
        observed_node("kunpeng920-2p") as plugin_node,
        PodResourcesEmulator(
            plugin_node.workdir / "kubelet" / "pod-resources" / "kubelet.sock"
        ) as kubelet_pods,
    ):
        kubelet_pods.set_pods([("shop", "checkout", "tls", HPRE, ["0000:79:00.0"])])
        assert plugin_node.wait_registered(3)
        plugin_target = plugin_node.base_url.removeprefix("http://")
        targets = {"node-a": plugin_target, "node-b": dra_target}
        with prometheus_scraping_nodes(targets, tmp_path) as prometheus:
            both = "count by (node) (kae_device_info)"  # both nodes scraped at least once
            assert wait_for(lambda: len(query(prometheus, both)) == 2), query(prometheus, "up")
            answers = {e: _rows(prometheus, e) for exprs in queries.values() for e in exprs}
    by_title = {title: [answers[e] for e in exprs] for title, exprs in queries.items()}
    (devices,) = by_title["Devices per node and engine"]
    counts = {(r["metric"]["node"], r["metric"]["engine"]): r["value"][1] for r in devices}
    assert counts[("node-a", "hpre")] == "2" and counts[("node-b", "sec")] == "3"
    healthy, unhealthy = by_title["Health over time"]
    assert {r["metric"]["node"] for r in healthy} == {"node-a", "node-b"}
    sick = {(r["metric"]["node"], r["metric"]["engine"]): r["value"][1] for r in unhealthy}
    assert (sick[("node-a", "hpre")], sick[("node-b", "hpre")]) == ("0", "2")
    (reasons,) = by_title["Unhealthy devices and why"]
    assert {r["metric"]["node"] for r in reasons} == {"node-b"}
    assert "isolated" in {r["metric"]["reason"] for r in reasons}
    (holders,) = by_title["Who holds what (device plugin)"]
    assert [(r["metric"]["node"], r["metric"]["pod"]) for r in holders] == [("node-a", "checkout")]
    in_use, claimed = by_title["Queues in use against claimed (shared DRA devices)"]
    # Both ZIPs are shared (hisi_zip-4 is unhealthy, so nothing claims it).
    assert {r["metric"]["device"]: r["value"][1] for r in claimed} == {
        "hisi_zip-4": "0",
        "hisi_zip-5": "8",
    }
    assert {r["metric"]["node"] for r in in_use} == {"node-b"}
    (writes,) = by_title["API writes (DRA)"]
    assert {r["metric"]["node"] for r in writes} == {"node-b"}  # the device plugin sends none
    assert {"create", "patch"} <= {r["metric"]["verb"] for r in writes}
