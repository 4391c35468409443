"""End-to-end fixtures: one real single-node cluster per session (scripts/cluster/up), fixture trees
with real device nodes, and the plugin as a host process.

The e2e tests run only with KAE_E2E=1 (scripts/cluster/ci-e2e sets it); the plain unit run skips
them without starting anything. When the five KAE_E2E_*/KUBECONFIG exports are already set, that
cluster is used as it is; otherwise scripts/cluster/up starts one (or reuses a running one) and
scripts/cluster/down stops it at the end if this session started it. In CI (CI=true) or with
KAE_REQUIRE_E2E=1 a cluster that cannot start is an error; elsewhere the tests skip with up's
one-line reason.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import (
    CLUSTER_SCRIPTS,
    EXPORTS,
    Cluster,
    FixtureTree,
    Plugin,
    e2e_required,
    make_plugin,
    parse_exports,
    tail,
)

HERE = Path(__file__).resolve().parent


def _enabled() -> bool:
    return os.environ.get("KAE_E2E") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs(*features): the test shows features of tests/e2e/stack.py's FEATURES; on a "
        "cluster whose stack lacks one it skips with the reason",
    )


def _skip_unless(cluster: Cluster, marks: list[pytest.Mark]) -> None:
    for mark in marks:
        for feature in mark.args:
            reason = cluster.stack.missing(feature)
            if reason is not None:
                pytest.skip(f"needs {feature}: {reason}")


@pytest.fixture(scope="module", autouse=True)
def _module_needs(request: pytest.FixtureRequest) -> None:
    """A module marked `needs` skips before its module-scoped fixtures (a chart release) run."""
    declared: object = getattr(request.module, "pytestmark", [])
    marks = [
        m
        for d in (declared if isinstance(declared, list) else [declared])
        if isinstance(m := getattr(d, "mark", d), pytest.Mark) and m.name == "needs"
    ]
    if marks and _enabled():
        _skip_unless(request.getfixturevalue("cluster"), marks)


@pytest.fixture(autouse=True)
def _needs(request: pytest.FixtureRequest) -> None:
    """A test marked `needs` skips, with the reason, on a stack that lacks a feature."""
    marks = list(request.node.iter_markers("needs"))
    if marks and _enabled():
        _skip_unless(request.getfixturevalue("cluster"), marks)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without KAE_E2E=1, mark every e2e test skipped (nothing is started)."""
    del config
    if _enabled():
        return
    skip = pytest.mark.skip(reason="e2e tests need a real cluster: set KAE_E2E=1 to run them")
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The running cluster: from the environment, else started here for the session."""
    if all(name in os.environ for name in EXPORTS):
        yield Cluster.from_env(dict(os.environ))
        return
    proc = subprocess.run(
        [str(CLUSTER_SCRIPTS / "up")],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.startswith("kae-e2e up:")]
        reason = lines[-1] if lines else (proc.stderr.strip().splitlines() or ["up failed"])[-1]
        if e2e_required():
            pytest.fail(f"the e2e cluster could not start: {reason}", pytrace=False)
        pytest.skip(f"the e2e cluster could not start: {reason}")
    reused = "reusing the running cluster" in proc.stderr
    try:
        yield Cluster.from_env(parse_exports(proc.stdout))
    finally:
        # Stop only a cluster this session started.
        if not reused:
            subprocess.run([str(CLUSTER_SCRIPTS / "down")], check=False, timeout=300)


@pytest.fixture
def tree_factory(tmp_path: Path) -> Callable[[str], FixtureTree]:
    """Copies of fixture trees with real character devices in their dev/."""

    def make(name: str) -> FixtureTree:
        return FixtureTree.copy(name, tmp_path)

    return make


@pytest.fixture
def plugin_factory(cluster: Cluster, tmp_path: Path) -> Iterator[Callable[..., Plugin]]:
    """Start `kae-deviceplugin serve` on a tree; every daemon started is stopped at the end."""
    started: list[Plugin] = []

    def make(
        tree: FixtureTree,
        registration: str,
        extra: list[str] | None = None,
    ) -> Plugin:
        workdir = tmp_path / f"plugin-{len(started)}"
        workdir.mkdir()
        plugin = make_plugin(cluster, tree, workdir, registration, extra=extra)
        started.append(plugin)
        plugin.start()
        plugin.wait_ready()
        return plugin

    yield make
    for plugin in started:
        plugin.stop()
    if started:
        # The kubelet marks a stopped plugin's devices unhealthy: wait for that to reach the node,
        # so the next test cannot read this one's allocatable.
        cluster.wait_resources(allocatable={"hpre": 0, "sec": 0, "zip": 0})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """On an e2e failure, append the plugin's and the kubelet's last log lines to the report."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    tmp = item.funcargs.get("tmp_path") if hasattr(item, "funcargs") else None
    sections = []
    if isinstance(tmp, Path):
        # Daemons log to plugin.log in their work dir: plugin-<n>/ (plugin_factory), the test's
        # tmp_path itself or a dir of the test's choosing (running_dra_plugin).
        for log in sorted(tmp.rglob("plugin.log")):
            sections.append((f"plugin log {log.parent.name}", tail(log)))
    deployment = item.funcargs.get("deployment") if hasattr(item, "funcargs") else None
    release = getattr(deployment, "release", None)
    if release is not None:
        sections.append(("chart's plugin pod log", release.logs()))
    state = os.environ.get("KAE_E2E_STATE", "/var/tmp/kae-e2e")
    sections.append(("kubelet log", tail(Path(state) / "logs" / "kubelet.log", 20)))
    for title, text in sections:
        report.sections.append((title, text))
    del call
