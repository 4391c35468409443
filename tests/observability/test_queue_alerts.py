"""The chart's queue alerts (issue 38) evaluated by Prometheus' own rule engine (`promtool test
rules`) on the real daemons' scrapes, taken while the test moves ``available_instances`` in the
sysfs tree as a real device's moves when processes open and close queues.

* Device-plugin mode (the daemon in-process over its real sockets, the kubelet's pod-resources
  API emulated on its socket): a pod holds hpre-2 and opens nothing, then opens 2 queues, then
  ends. KaeDeviceGrantUnused fires (naming the pod) only after ``unusedGrantFor`` of the first
  phase; nothing else fires.
* DRA mode (``serve --mode dra`` as a process, an HTTP API server, two shares of 8 and 16 of a
  shared ZIP prepared over the kubelet's DRA socket): 20 queues open is within the grants,
  30 is more; KaeDeviceQueuesOverGrant fires for the second only. An exclusive HPRE claim whose
  pod the kubelet's pod-resources API reports (emulated on its socket) opens nothing:
  KaeDeviceGrantUnused names the pod and the claim.

Each scrape becomes a phase of promtool's input series, labelled with the scrape target's
``instance`` and ``job`` as Prometheus adds them (``honor_labels`` keeps ours). Skipped without
promtool (Debian package prometheus) or Helm 3.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kae_deviceplugin.testing.podresources_emulator import ClaimDevices, PodResourcesEmulator
from kae_deviceplugin.testing.sysfs_builder import set_attribute
from tests.deploy.test_deploy import CHART, helm_run
from tests.support.dra_claims import DRIVER, Result, claim_object
from tests.support.dra_kubelet import Claim
from tests.support.dra_process import NODE, DraProcess, device_names, dra_node, dra_process
from tests.support.http_apiserver import HttpApiServer
from tests.support.observability_harness import observed_node, wait_until

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)"
)
HPRE = "openfuyao.com/kae.hpre"
TARGET = {"instance": "node-a:9410", "job": "kae"}  # what the scrape adds
QUEUE_ALERTS = ("KaeDeviceGrantUnused", "KaeDeviceQueuesOverGrant")
PHASE = 20  # minutes each scrape stands for


def chart_rules(workdir: Path, *sets: str) -> tuple[Path, list[str]]:
    """The chart's PrometheusRule as a rule file, and its alerts' names."""
    flags = [f"--set={s}" for s in ("metrics.prometheusRule.enabled=true", *sets)]
    shown = ("--show-only", "templates/prometheusrule.yaml")
    out = helm_run("template", "kae", str(CHART), *shown, *flags)
    assert out.returncode == 0, out.stderr
    groups = yaml.safe_load(out.stdout)["spec"]["groups"]
    path = workdir / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    return path, [r["alert"] for g in groups for r in g["rules"]]


def firing(rules: Path, alert: str, summary: str, **labels: str) -> dict[str, Any]:
    """An expected alert: its labels, the summary it must read, the rule's description."""
    groups = yaml.safe_load(rules.read_text())["groups"]
    rule = next(r for g in groups for r in g["rules"] if r.get("alert") == alert)
    return {
        "exp_labels": {**TARGET, "severity": rule["labels"]["severity"], **labels},
        "exp_annotations": {"summary": summary, "description": rule["annotations"]["description"]},
    }


def series_of(scrape: str) -> dict[str, float]:
    """promtool series selector -> value, for every finite sample of a scrape, with the target
    labels; empty labels are left out, as Prometheus stores them."""
    found = {}
    for family in text_string_to_metric_families(scrape):
        for sample in family.samples:
            if math.isfinite(sample.value):
                labels = {**TARGET, **{k: v for k, v in sample.labels.items() if v}}
                shown = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
                found[f"{sample.name}{{{shown}}}"] = sample.value
    return found


def input_series(phases: Sequence[str]) -> list[dict[str, str]]:
    """One promtool input series per series seen in any scrape: each scrape's value for PHASE
    minutes, missing (``_``) where that scrape lacks it."""
    taken = [series_of(scrape) for scrape in phases]
    names = sorted({name for scrape in taken for name in scrape})
    return [
        {
            "series": name,
            "values": " ".join(
                f"{s[name]!r}+0x{PHASE - 1}" if name in s else f"_x{PHASE}" for s in taken
            ),
        }
        for name in names
    ]


def promtool_test(workdir: Path, rules: Path, case: dict[str, Any]) -> None:
    assert PROMTOOL is not None
    spec = workdir / "test.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "tests": [case]}))
    done = subprocess.run(
        [PROMTOOL, "test", "rules", str(spec)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def expect(alerts: Sequence[str], firing: dict[tuple[str, str], list[dict[str, Any]]]) -> list[Any]:
    """An alert_rule_test per alert and evaluation time; silent unless ``firing`` says."""
    times = [f"{m}m" for m in (5, 15, 25, 35, 45, 55)]
    return [
        {"alertname": a, "eval_time": t, "exp_alerts": firing.get((a, t), [])}
        for a in alerts
        for t in times
    ]


def device_value(scrape: str, family: str, device: str) -> float | None:
    """``family``'s value for ``device`` in a scrape (None: no such series)."""
    for found in text_string_to_metric_families(scrape):
        if found.name == family:
            for sample in found.samples:
                if sample.labels["device"] == device:
                    return float(sample.value)
    return None


def scrape_when(get: Callable[[], str], device: str, in_use: float, held: bool) -> str:
    """The first scrape in which ``device`` has ``in_use`` queues open and is held or not."""

    def check() -> str | None:
        text = get()
        holders = device_value(text, "kae_device_holders", device)
        opened = device_value(text, "kae_device_queues_in_use", device)
        return text if opened == in_use and (holders is not None) == held else None

    found = wait_until(check)
    assert found, get()
    return str(found)


def test_device_plugin_grant_unused_fires_for_an_idle_pod_only(tmp_path: Path) -> None:
    """A pod holding hpre-2 with no queue open for 20 minutes: KaeDeviceGrantUnused fires at 15
    minutes (not at 5: it waits ``unusedGrantFor``, 10m), naming the pod; silent once the pod
    opens 2 queues and after it ends; no other alert of the chart fires at any time."""
    rules, alerts = chart_rules(tmp_path)
    assert set(QUEUE_ALERTS) <= set(alerts)
    with (
        observed_node("kunpeng920-2p") as node,
        PodResourcesEmulator(node.workdir / "kubelet" / "pod-resources" / "kubelet.sock") as pods,
    ):
        assert node.wait_registered(3)
        pods.set_pods([("shop", "checkout", "tls", HPRE, ["0000:79:00.0"])])
        idle = scrape_when(node.scrape, "hisi_hpre-2", 0, held=True)
        set_attribute(node.root, "hisi_hpre-2", "available_instances", "254")
        busy = scrape_when(node.scrape, "hisi_hpre-2", 2, held=True)
        pods.set_pods([])
        set_attribute(node.root, "hisi_hpre-2", "available_instances", "256")
        ended = scrape_when(node.scrape, "hisi_hpre-2", 0, held=False)
    summary = "KAE device hisi_hpre-2 is held by shop/checkout but no queue of it is open"
    alert = firing(
        rules, "KaeDeviceGrantUnused", summary, engine="hpre", device="hisi_hpre-2",
        pci_address="0000:79:00.0", namespace="shop", pod="checkout",
    )  # fmt: skip
    fired = {("KaeDeviceGrantUnused", "15m"): [alert]}
    promtool_test(
        tmp_path,
        rules,
        {"interval": "1m", "input_series": input_series([idle, busy, ended]),
         "alert_rule_test": expect(alerts, fired)},
    )  # fmt: skip


ZIP = "zip-0000-b5-00-0"  # hisi_zip-5 of kunpeng920-2p
HPRE_DEVICE = "hpre-0000-79-00-0"  # hisi_hpre-2


def shared_scrape(dra: DraProcess, in_use: int) -> str:
    """Set hisi_zip-5's open queues to ``in_use``; the next scrape that shows it."""
    set_attribute(dra.node.root, "hisi_zip-5", "available_instances", str(256 - in_use))

    def get() -> str:
        url = f"http://127.0.0.1:{dra.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return str(answer.read().decode())

    return scrape_when(get, "hisi_zip-5", in_use, held=True)


def test_dra_queues_over_grant_fires_only_above_the_sum_of_shares(tmp_path: Path) -> None:
    """Two claims share hisi_zip-5 (8 + 16 = 24 granted). Nothing open for 20 minutes: only
    KaeDeviceGrantUnused, with no pod named (two holders); 20 open (within the grants): silent;
    30 open: KaeDeviceQueuesOverGrant at 5 minutes into it, with the figure. An exclusive claim
    on hisi_hpre-2 whose pod the kubelet reports (pod-resources, on its socket) and which opens
    nothing: KaeDeviceGrantUnused from 10 minutes on, naming the pod and the claim."""
    rules, _ = chart_rules(tmp_path, "dra.enabled=true")
    with HttpApiServer() as api:
        api.seed_node(NODE)
        refs = []
        results = [
            (name, Result("zip", ZIP, NODE, share_id=str(uuid.uuid4()), consumed_queues=queues))
            for name, queues in (("a", "8"), ("b", "16"))
        ]
        for namespace, name, result in [
            *(("etl", n, r) for n, r in results),
            ("shop", "tls", Result("hpre", HPRE_DEVICE, NODE)),
        ]:
            claim = api.seed("resourceclaims", claim_object(namespace, name, [result]))
            refs.append(Claim(namespace, name, claim["metadata"]["uid"]))
        with (
            dra_node("kunpeng920-2p") as node,
            PodResourcesEmulator(node.kubelet_root / "pod-resources" / "kubelet.sock") as pods,
            dra_process(node, api, args=["--shared-engines", "zip"]) as dra,
        ):
            pods.set_pods(
                [], [ClaimDevices("shop", "checkout", "tls", "shop", "tls", DRIVER, NODE,
                                  [HPRE_DEVICE])]
            )  # fmt: skip
            dra.register()
            assert api.wait_for(lambda: ZIP in device_names(api.slices()), 10), dra.describe()
            assert all(p.error == "" for p in dra.prepare(refs).values())
            phases = [shared_scrape(dra, n) for n in (0, 20, 30)]
    assert device_value(phases[0], "kae_device_queues_claimed", "hisi_zip-5") == 24
    assert device_value(phases[0], "kae_device_queues_claimed", "hisi_hpre-2") == 256
    device = {"engine": "zip", "device": "hisi_zip-5", "pci_address": "0000:b5:00.0"}
    hpre = {"engine": "hpre", "device": "hisi_hpre-2", "pci_address": "0000:79:00.0"}
    idle = firing(
        rules, "KaeDeviceGrantUnused",
        "KAE device hisi_hpre-2 is held by shop/checkout but no queue of it is open",
        namespace="shop", pod="checkout", claim="tls", **hpre,
    )  # fmt: skip
    unused = "KAE device hisi_zip-5 is held but no queue of it is open"
    over = "KAE device hisi_zip-5 has 30 queues open, more than its holders were granted"
    fired: dict[tuple[str, str], list[dict[str, Any]]] = {
        ("KaeDeviceGrantUnused", f"{m}m"): [idle] for m in (25, 35, 45, 55)
    }
    fired[("KaeDeviceGrantUnused", "15m")] = [
        idle,
        firing(rules, "KaeDeviceGrantUnused", unused, **device),
    ]
    for when in ("45m", "55m"):
        fired[("KaeDeviceQueuesOverGrant", when)] = [
            firing(rules, "KaeDeviceQueuesOverGrant", over, **device)
        ]
    promtool_test(
        tmp_path,
        rules,
        {"interval": "1m", "input_series": input_series(phases),
         "alert_rule_test": expect(QUEUE_ALERTS, fired)},
    )  # fmt: skip
