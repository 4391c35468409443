"""The metric names the docs give are the real daemon's: every ``kae_*`` name a document names is
in a live scrape of a device-plugin daemon or of a DRA daemon, and every metric either exposes
is described in docs/observability.md.

The device-plugin daemon runs on the ``faults`` tree (so reason series exist) with the kubelet's
pod-resources API answering (so holder series exist); the DRA daemon
is ``serve --mode dra`` against the tests' HTTP API server with ZIP shared and a claim of 8
queues prepared (so the queue series exist), as the dashboard's test runs them; two more
device-plugin daemons serve the node-fact trees where devices run without SVA (the CMA series)
and where an engine is absent (its likely cause).
"""

from __future__ import annotations

import functools
import re
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kae_deviceplugin.testing.podresources_emulator import PodResourcesEmulator
from tests.docs.markdown import CURRENT_DOCS, read
from tests.observability.test_dashboard import dra_node_with_a_share
from tests.support.fact_trees import FACT_TREES
from tests.support.http_apiserver import HttpApiServer
from tests.support.observability_harness import ObservedNode, observed_node, wait_until

# A metric name in prose or code: kae_ then a name; the package (kae_deviceplugin) and file
# names (openfuyao.com-kae_<uid>.json) are not metrics.
NAME = re.compile(r"(?<![\w.\-/])kae_[a-z][a-z0-9_]*[a-z0-9]")
NOT_METRICS = ("kae_deviceplugin",)
TYPE_LINE = re.compile(r"^# TYPE (\S+) \S+$", re.M)
SAMPLE_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", re.M)


def scrape(address: str) -> str:
    """The classic text format, as curl gets it."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
        body: bytes = answer.read()
    return body.decode()


def exposed(text: str) -> tuple[set[str], set[str]]:
    """The metric names of a scrape (its TYPE lines: ``kae_allocations_total``,
    ``kae_scan_duration_seconds``) and every sample name (``..._bucket`` too)."""
    return set(TYPE_LINE.findall(text)), set(SAMPLE_LINE.findall(text))


# A metric with the labels the docs give it: kae_device_info{engine, device, ...}.
WITH_LABELS = re.compile(r"(?<![\w.\-/])(kae_[a-z][a-z0-9_]*[a-z0-9])\{([a-z_, .]*)\}")


def documented_labels(text: str) -> dict[str, set[str]]:
    """Metric -> the label names the docs give it (``...`` and selectors such as
    ``{pod=""}`` aside)."""
    named: dict[str, set[str]] = {}
    for name, labels in WITH_LABELS.findall(" ".join(text.split())):
        named.setdefault(name, set()).update(
            label.strip() for label in labels.split(",") if label.strip() not in {"", "..."}
        )
    return named


def exposed_labels(text: str) -> dict[str, set[str]]:
    """Sample name and metric name -> every label of its samples (``le`` aside)."""
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for name in (family.name, sample.name):
                labels.setdefault(name, set()).update(set(sample.labels) - {"le"})
    return labels


def documented(text: str) -> set[str]:
    return {n for n in NAME.findall(text) if not n.startswith(NOT_METRICS)}


def _has(node: ObservedNode, series: str) -> bool:
    return series in node.scrape()


@pytest.fixture(scope="module")
def scrapes() -> Iterator[dict[str, str]]:
    """One scrape of each mode's real daemon."""
    socket = "kubelet/pod-resources/kubelet.sock"
    with observed_node("faults") as plugin_node, PodResourcesEmulator(plugin_node.workdir / socket):
        assert plugin_node.wait_registered(3)
        plugin = plugin_node.scrape()
    with HttpApiServer() as api, dra_node_with_a_share(api) as address:
        dra = scrape(address)
    facts = {}
    for tree, series in (
        ("no-sva-low-cma", "kae_cma_free_bytes"),
        ("no-licence", "kae_engine_absent"),
    ):
        with observed_node(build=FACT_TREES[tree]) as fact_node:
            assert wait_until(functools.partial(_has, fact_node, series)), fact_node.scrape()
            facts[tree] = fact_node.scrape()
    yield {"device-plugin": plugin, "dra": dra, **facts}


def test_every_metric_the_docs_name_is_in_a_live_scrape(scrapes: dict[str, str]) -> None:
    """A metric renamed or removed fails here until the docs stop naming it."""
    names: set[str] = set()
    for text in scrapes.values():
        metrics, samples = exposed(text)
        names |= metrics | samples
    unknown = {f"{doc}: {name}" for doc in CURRENT_DOCS for name in documented(read(doc)) - names}
    assert not unknown, "metrics the docs name and no daemon exposes:\n" + "\n".join(
        sorted(unknown)
    )


def test_the_labels_the_docs_give_a_metric_are_its_labels(scrapes: dict[str, str]) -> None:
    """A label renamed or dropped fails here until the docs write the new one."""
    real: dict[str, set[str]] = {}
    for text in scrapes.values():
        for name, labels in exposed_labels(text).items():
            real.setdefault(name, set()).update(labels)
    # A family no scrape has a sample of (the VF profiles' series: no profile is set on these
    # nodes; tests/observability/test_vf_metrics.py reads their labels) shows no labels here.
    wrong = {
        f"{doc}: {name}{{{', '.join(sorted(labels - real.get(name, set())))}}}"
        for doc in CURRENT_DOCS
        for name, labels in documented_labels(read(doc)).items()
        if name in real and labels - real[name]
    }
    assert not wrong, "labels the metrics do not have:\n" + "\n".join(sorted(wrong))


def test_every_metric_the_daemons_expose_is_in_observability_md(
    scrapes: dict[str, str],
) -> None:
    """A new metric fails here until docs/observability.md describes it (process and
    platform collectors aside, which the page names as such)."""
    described = documented(read("docs/observability.md"))
    missing = {
        f"{mode}: {name}"
        for mode, text in scrapes.items()
        for name in exposed(text)[0]
        if name.startswith("kae_") and name not in described
    }
    assert not missing, "exposed but not in docs/observability.md:\n" + "\n".join(sorted(missing))


def test_the_metric_name_check_can_fail() -> None:
    """Names are read as the docs write them, and one no scrape has is told apart."""
    text = (
        "`kae_device_healthy == 0`, kae_apiserver_requests_total{verb}, see kae_deviceplugin/,\n"
        "`openfuyao.com-kae_<uid>.json`, kae_no_such_metric\n"
    )
    assert documented(text) == {
        "kae_device_healthy",
        "kae_apiserver_requests_total",
        "kae_no_such_metric",
    }
    scrape_text = '# TYPE kae_device_healthy gauge\nkae_device_healthy{device="x"} 1.0\n'
    assert documented(text) - exposed(scrape_text)[0] - exposed(scrape_text)[1] == {
        "kae_apiserver_requests_total",
        "kae_no_such_metric",
    }
