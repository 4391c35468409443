"""A running daemon with its HTTP endpoint on a free port, and ways to ask that endpoint."""

from __future__ import annotations

import dataclasses
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from kae_deviceplugin.daemon.run import build_daemon
from kae_deviceplugin.observability.http import EndpointTask
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import DEADLINE, DaemonThread, Node, settings_for, short_tmpdir


def wait_until(check: Callable[[], Any], timeout: float = DEADLINE) -> Any:
    """Poll ``check`` until it returns something truthy (returned) or ``timeout`` passes (None)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result or None
        time.sleep(0.02)


@dataclasses.dataclass
class ObservedNode(Node):
    """A fake node whose daemon also serves the metrics endpoint."""

    endpoint: EndpointTask = dataclasses.field(default_factory=EndpointTask)

    @property
    def base_url(self) -> str:
        assert self.endpoint.bound.wait(DEADLINE), "the endpoint never listened"
        return f"http://127.0.0.1:{self.endpoint.port}"

    def get(self, path: str, accept: str | None = None) -> tuple[int, str, bytes]:
        """Status, content type and body of GET ``path`` (error statuses included)."""
        request = urllib.request.Request(self.base_url + path)
        if accept is not None:
            request.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(request, timeout=DEADLINE) as answer:
                return answer.status, answer.headers["Content-Type"], answer.read()
        except urllib.error.HTTPError as err:
            return err.code, err.headers["Content-Type"], err.read()

    def scrape(self) -> str:
        status, _, body = self.get("/metrics")
        assert status == 200, body
        return body.decode()

    def samples(self, name: str) -> list[Sample]:
        """Every sample of metric family ``name`` in a fresh scrape."""
        families = text_string_to_metric_families(self.scrape())
        return [s for family in families if family.name == name for s in family.samples]

    def by_device(self, name: str) -> dict[str, float]:
        """Family ``name`` keyed by the ``device`` label (one sample per device expected)."""
        return {s.labels["device"]: s.value for s in self.samples(name)}


@contextmanager
def observed_node(
    tree: str = "kunpeng920-2p-vfs",
    *,
    start_kubelet: bool = True,
    build: Callable[[Path], None] | None = None,
    **changes: Any,
) -> Iterator[ObservedNode]:
    """Like ``harness.running_node``, plus the endpoint on 127.0.0.1 at a free port. ``build``
    makes the node's tree instead of the named ``tree``."""
    with short_tmpdir() as workdir:
        root = workdir / "node"
        (build or TREES[tree].build)(root)
        changes = {"metrics_address": "127.0.0.1:0", **changes}
        settings = settings_for(workdir, **changes)
        kubelet = KubeletEmulator(settings.effective_device_plugin_dir, dial_timeout=5.0)
        if start_kubelet:
            kubelet.start()
        endpoint = EndpointTask(max_age=0.0)  # every scrape asks the pod-resources API
        runner = DaemonThread(
            build_daemon(settings, extra_tasks=[endpoint.run], with_optional=False)
        )
        runner.start()
        try:
            yield ObservedNode(workdir, root, kubelet, runner, endpoint)
        finally:
            try:
                if runner.alive:
                    assert runner.stop() == 0, "the daemon failed"
            finally:
                kubelet.stop()
