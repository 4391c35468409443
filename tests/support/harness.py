"""Running the real daemon in-process against the kubelet emulator, over real unix sockets."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kae_deviceplugin.cli.demo import demo_settings
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.daemon.run import DevicePluginDaemon, build_daemon
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_trees import TREES

DEADLINE = 10.0


@contextmanager
def short_tmpdir() -> Iterator[Path]:
    """A temp dir under /tmp: unix socket paths must stay under ~100 bytes."""
    path = Path(tempfile.mkdtemp(prefix="kae", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def settings_for(workdir: Path, **changes: Any) -> Settings:
    """The demo's sandbox settings (everything under ``workdir``), with ``changes`` applied.
    The runtime config is an absent file in ``workdir``, not this machine's /etc/containerd."""
    changes.setdefault("runtime_config", workdir / "absent-runtime-config.toml")
    return dataclasses.replace(demo_settings(workdir), **changes)


class DaemonThread:
    """The daemon on its own thread and event loop; the test thread drives the emulator."""

    def __init__(self, daemon: DevicePluginDaemon) -> None:
        self.daemon = daemon
        self.exit_code: int | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="daemon", daemon=True)

    def _main(self) -> None:
        try:
            self.exit_code = asyncio.run(self.daemon.run(handle_signals=False))
        except BaseException as err:  # surfaced to the test by stop()
            self.error = err

    def start(self) -> None:
        self._thread.start()

    def rescan(self) -> None:
        self.daemon.call_threadsafe(self.daemon.scan.rescan_now.set)

    def stop(self, timeout: float = DEADLINE) -> int | None:
        self.daemon.call_threadsafe(self.daemon.request_stop)
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "daemon did not stop in time"
        if self.error is not None:
            raise self.error
        return self.exit_code

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


@dataclasses.dataclass
class Node:
    """A fake node: sysfs tree, kubelet emulator, running daemon."""

    workdir: Path
    root: Path
    kubelet: KubeletEmulator
    runner: DaemonThread

    @property
    def daemon(self) -> DevicePluginDaemon:
        return self.runner.daemon

    def wait_registered(self, count: int = 3, timeout: float = DEADLINE) -> bool:
        """Wait until ``count`` resources have a live stream with at least one device."""

        def check(kubelet: KubeletEmulator) -> bool:
            live = 0
            for resource, devices in kubelet.resources().items():
                state = kubelet.state(resource)
                live += bool(devices) and state is not None and not state.stream_ended
            return live >= count

        return self.kubelet.wait_for(check, timeout)

    def view(self, resource: str) -> dict[str, tuple[str, tuple[int, ...]]]:
        """The kubelet's current view of one resource: ID -> (health, NUMA nodes)."""
        devices = self.kubelet.resources().get(resource, [])
        return {d.id: (d.health, tuple(d.numa_nodes)) for d in devices}

    def wait_view(self, resource: str, predicate: Any, timeout: float = DEADLINE) -> bool:
        def check(kubelet: KubeletEmulator) -> bool:
            devices = kubelet.resources().get(resource, [])
            return bool(predicate({d.id: (d.health, tuple(d.numa_nodes)) for d in devices}))

        return self.kubelet.wait_for(check, timeout)


@contextmanager
def running_node(tree: str = "kunpeng920-2p", **changes: Any) -> Iterator[Node]:
    with short_tmpdir() as workdir:
        root = workdir / "node"
        TREES[tree].build(root)
        settings = settings_for(workdir, **changes)
        kubelet = KubeletEmulator(settings.effective_device_plugin_dir, dial_timeout=5.0)
        kubelet.start()
        runner = DaemonThread(build_daemon(settings, with_optional=False))
        runner.start()
        try:
            yield Node(workdir, root, kubelet, runner)
        finally:
            try:
                if runner.alive:
                    runner.stop()
            finally:
                kubelet.stop()
