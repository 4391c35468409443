"""Who holds what: the pod-resources client, its use in metrics, /allocations and the CLI."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import grpc
import pytest

from kae_deviceplugin._generated.podresources.v1 import api_pb2
from kae_deviceplugin.cli import allocations
from kae_deviceplugin.cli.allocations import (
    AllocationsUnavailable,
    endpoint_url,
    from_endpoint,
    from_socket,
    gather,
    render_json,
    render_table,
)
from kae_deviceplugin.kubelet import podresources
from kae_deviceplugin.kubelet.podresources import Allocation, Allocations, allocations_from
from kae_deviceplugin.testing.podresources_emulator import PodResourcesEmulator, pod_resources
from tests.support.harness import short_tmpdir
from tests.support.observability_harness import ObservedNode, observed_node, wait_until

HPRE, SEC = "openfuyao.com/kae.hpre", "openfuyao.com/kae.sec"
PODS = [
    ("prod", "tls-0", "nginx", HPRE, ["0000:79:00.0"]),
    ("prod", "tls-0", "nginx", "example.com/gpu", ["gpu-0"]),
    ("batch", "zipper", "worker", SEC, ["0000:b6:00.1", "0000:76:00.2"]),
]
EXPECTED = [  # sorted by resource, then device ID
    Allocation(HPRE, "0000:79:00.0", "prod", "tls-0", "nginx"),
    Allocation(SEC, "0000:76:00.2", "batch", "zipper", "worker"),
    Allocation(SEC, "0000:b6:00.1", "batch", "zipper", "worker"),
]


def test_list_answer_is_filtered_to_our_resources_and_sorted() -> None:
    """Foreign resources are dropped; rows are sorted and indexed by device ID."""
    response = api_pb2.ListPodResourcesResponse(pod_resources=pod_resources(PODS))
    found = allocations_from(response)
    assert list(found.rows) == EXPECTED
    assert found.by_id["0000:79:00.0"] == (("prod", "tls-0", "nginx"),)
    assert "gpu-0" not in found.by_id


def test_a_device_reported_for_init_and_app_container_has_both_holders() -> None:
    """The kubelet reuses an init container's devices for the app container; both are kept."""
    both = [("ns", "p", "init", HPRE, ["0000:79:00.0"]), ("ns", "p", "app", HPRE, ["0000:79:00.0"])]
    found = allocations_from(api_pb2.ListPodResourcesResponse(pod_resources=pod_resources(both)))
    assert found.by_id["0000:79:00.0"] == (("ns", "p", "app"), ("ns", "p", "init"))
    assert Allocations(found.rows + found.rows) == found  # duplicates collapse


def holders(node: ObservedNode) -> set[tuple[str, str, str, str]]:
    return {
        (s.labels["pci_address"], s.labels["namespace"], s.labels["pod"], s.labels["container"])
        for s in node.samples("kae_device_allocated")
        if s.labels["pod"]
    }


def pod_resources_up(node: ObservedNode) -> float:
    (sample,) = node.samples("kae_pod_resources_up")
    return sample.value


def test_pod_names_appear_in_metrics_endpoint_and_cli() -> None:
    """With the emulator serving, kae_device_allocated, /allocations and the CLI name the pods."""
    with observed_node() as node:
        socket = node.daemon.settings.effective_pod_resources_socket
        with PodResourcesEmulator(socket) as kubelet:
            kubelet.set_pods(PODS)
            want = {
                ("0000:79:00.0", "prod", "tls-0", "nginx"),
                ("0000:b6:00.1", "batch", "zipper", "worker"),
                ("0000:76:00.2", "batch", "zipper", "worker"),
            }
            assert wait_until(lambda: holders(node) == want)
            assert pod_resources_up(node) == 1
            assert from_endpoint(node.base_url) == EXPECTED
            assert from_socket(socket) == EXPECTED
            rows, source = gather(node.base_url, socket)
            assert (rows, source) == (EXPECTED, node.base_url)
            table = render_table(rows)
            assert "tls-0" in table and "zipper" in table and "NAMESPACE" in table
            assert '"pod": "tls-0"' in render_json(rows)

            kubelet.set_pods([])  # pods deleted: their labels go with them
            assert wait_until(lambda: not holders(node))
            assert from_endpoint(node.base_url) == []


def warnings_since(caplog: pytest.LogCaptureFixture, start: int = 0) -> list[str]:
    return [r.getMessage() for r in caplog.records[start:] if r.levelno == logging.WARNING]


def test_failing_or_absent_pod_resources_never_crash_and_warn_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Absent socket, then UNAVAILABLE answers: no pod labels, up=0, one warning per state."""
    caplog.set_level(logging.INFO, logger="kae_deviceplugin.kubelet.podresources")
    queries = [0]
    real_query = podresources.list_allocations

    async def counted(*args: Any, **kwargs: Any) -> Allocations:
        queries[0] += 1
        return await real_query(*args, **kwargs)

    monkeypatch.setattr(podresources, "list_allocations", counted)
    with observed_node() as node:
        assert node.wait_registered(3)
        for _ in range(5):  # each scrape asks (the harness keeps no answer for the next)
            node.samples("kae_pod_resources_up")
        assert queries[0] >= 5
        assert len(warnings_since(caplog)) == 1
        assert "does not exist" in warnings_since(caplog)[0]
        assert pod_resources_up(node) == 0
        assert node.samples("kae_device_allocated") == []
        socket = node.daemon.settings.effective_pod_resources_socket
        with PodResourcesEmulator(socket) as kubelet:
            kubelet.set_pods(PODS)
            assert wait_until(lambda: holders(node))
            mark = len(caplog.records)
            kubelet.set_failing(grpc.StatusCode.UNAVAILABLE)
            calls = kubelet.calls
            for _ in range(5):
                assert not holders(node)
            assert kubelet.calls >= calls + 5  # several failed queries
            assert pod_resources_up(node) == 0
            assert node.runner.alive and node.get("/healthz")[0] == 200
            failing = warnings_since(caplog, mark)
            assert len(failing) == 1 and "UNAVAILABLE" in failing[0], failing
            kubelet.set_failing(None)
            assert wait_until(lambda: holders(node))
            assert "answers again" in caplog.text


def test_cli_falls_back_to_the_socket_and_reports_both_failures() -> None:
    """A dead endpoint falls back to the socket; with both dead, one error names both."""
    with short_tmpdir() as tmp:
        socket = tmp / "pod-resources.sock"
        dead = "http://127.0.0.1:9"  # discard port: nothing listens there
        with PodResourcesEmulator(socket) as kubelet:
            kubelet.set_pods(PODS)
            rows, source = gather(dead, socket)
            assert (rows, source) == (EXPECTED, str(socket))
        with pytest.raises(AllocationsUnavailable) as caught:
            gather(dead, socket)
        assert "127.0.0.1:9" in str(caught.value) and str(socket) in str(caught.value)


def test_cli_with_nothing_to_ask_is_an_error() -> None:
    """Neither an endpoint nor a socket: a clear error rather than an empty table."""
    with pytest.raises(AllocationsUnavailable, match="nothing to ask"):
        gather(None, None)


@pytest.mark.parametrize(
    ("address", "url"),
    [
        (":9410", "http://127.0.0.1:9410"),
        ("0.0.0.0:9410", "http://127.0.0.1:9410"),
        ("[::]:9410", "http://[::1]:9410"),
        ("10.0.0.5:80", "http://10.0.0.5:80"),
    ],
)
def test_endpoint_url_from_metrics_address(address: str, url: str) -> None:
    """A wildcard listen address is reached over loopback of the same family."""
    assert endpoint_url(address) == url


def test_empty_table_says_so() -> None:
    """No allocations: one sentence, not an empty header."""
    assert render_table([]) == "no KAE device is allocated to a pod"
    assert render_json([]) == "[]"


def test_socket_errors_name_the_socket(tmp_path: Path) -> None:
    """A missing socket is reported with its path, as AllocationsUnavailable."""
    with pytest.raises(AllocationsUnavailable, match="does not exist"):
        allocations.from_socket(tmp_path / "absent.sock")


def test_source_asks_only_when_asked_and_shares_young_answers() -> None:
    """Nothing is asked until fresh() is awaited; callers waiting together, and a caller
    within max_age of the answer, share one List; an older answer is asked anew."""

    async def scenario(socket: Path, kubelet: PodResourcesEmulator) -> None:
        source = podresources.AllocationsSource(socket, max_age=60.0)
        await asyncio.sleep(0.05)
        assert (source.queries, kubelet.calls) == (0, 0)
        first, second = await asyncio.gather(source.fresh(), source.fresh())
        assert first is second and first.current is not None
        assert list(first.current.rows) == EXPECTED
        assert (source.queries, kubelet.calls) == (1, 1)
        await source.fresh()
        assert kubelet.calls == 1, "a young answer is given again"
        source.max_age = 0.0
        kubelet.set_pods([])
        again = await source.fresh()
        assert kubelet.calls == 2 and again.current is not None and again.current.rows == ()

    with short_tmpdir() as tmp:
        socket = tmp / "pod-resources.sock"
        with PodResourcesEmulator(socket) as kubelet:
            kubelet.set_pods(PODS)
            asyncio.run(scenario(socket, kubelet))


def test_an_idle_daemon_never_asks_the_pod_resources_api() -> None:
    """With the endpoint on but nobody scraping, the kubelet's List is never called."""
    with observed_node() as node:
        socket = node.daemon.settings.effective_pod_resources_socket
        with PodResourcesEmulator(socket) as kubelet:
            assert node.wait_registered(3)
            rescans = node.daemon.counters.sample("kae_scan_duration_seconds_count")
            assert wait_until(
                lambda: (
                    node.daemon.counters.sample("kae_scan_duration_seconds_count") >= rescans + 3
                )
            )
            assert kubelet.calls == 0
            node.get("/allocations")
            assert kubelet.calls == 1


def test_a_loop_stopped_right_after_a_scrape_began_leaves_no_ask_behind(tmp_path: Path) -> None:
    """The loop stops in the very turn a scrape's task first ran (a test's endpoint loop was
    stopped so, under load, as the README's test run hit): no pod-resources ask is left
    pending, never started, to be destroyed with the loop ("Exception ignored in: coroutine
    AllocationsSource._ask", RuntimeWarning: never awaited). The ask runs in the scrape's own
    task, so it starts when it is made."""
    source = podresources.AllocationsSource(tmp_path / "absent.sock", max_age=0.0)
    loop = asyncio.new_event_loop()
    destroyed: list[str] = []
    try:
        scrape = loop.create_task(source.fresh())
        loop.call_soon(loop.stop)  # after the scrape's first step, in the same turn
        loop.run_forever()
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in left:  # what the loop's end would have destroyed, named and disposed of
            coro = task.get_coro()
            assert isinstance(coro, Coroutine)
            destroyed.append(getattr(coro, "__qualname__", repr(coro)))
            coro.close()
        assert scrape.done() and scrape.result().problem is not None
    finally:
        loop.close()
    assert destroyed == [] and source.queries == 1
