"""At exit the daemon removes the files it wrote on the host (the container sysfs view, the CDI
spec, the NFD feature file), but only when the kubelet's pod-resources API says that no container
holds one of its devices; otherwise, or when the kubelet cannot say, it keeps them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from kae_deviceplugin.container.cdi import SPEC_FILE
from kae_deviceplugin.container.sysfs_view import VIEW_DIR_NAME
from kae_deviceplugin.daemon.run import build_daemon
from kae_deviceplugin.observability import nfd
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.podresources_emulator import Assignment, PodResourcesEmulator
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import DEADLINE, DaemonThread, settings_for, short_tmpdir

HPRE = "openfuyao.com/kae.hpre"


def _wait(what: str, probe: Callable[[], bool], timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.02)


@contextmanager
def _served(pods: list[Assignment] | None) -> Iterator[tuple[list[Path], DaemonThread]]:
    """A daemon with the view, CDI and the NFD file on; pods=None: no pod-resources socket.
    Yields the three files' paths once all exist, and the running daemon."""
    with short_tmpdir() as workdir:
        TREES["kunpeng920-2p"].build(workdir / "node")
        (workdir / "features.d").mkdir()
        settings = settings_for(
            workdir,
            cdi=True,
            cdi_dir=workdir / "cdi",
            nfd_features_file=workdir / "features.d" / "kae",
        )
        files = [
            settings.state_dir / VIEW_DIR_NAME,
            settings.cdi_dir / SPEC_FILE,
            workdir / "features.d" / "kae",
        ]
        kubelet = KubeletEmulator(settings.effective_device_plugin_dir, dial_timeout=5.0)
        pod_resources = PodResourcesEmulator(settings.effective_pod_resources_socket)
        pod_resources.set_pods(pods or [])
        kubelet.start()
        if pods is not None:
            pod_resources.start()
        runner = DaemonThread(
            build_daemon(
                settings, extra_tasks=[lambda d: nfd.nfd_task(d.scan)], with_optional=False
            )
        )
        runner.start()
        try:
            _wait("the view, CDI spec and NFD file written", lambda: all(f.exists() for f in files))
            yield files, runner
        finally:
            try:
                if runner.alive:
                    runner.stop()
            finally:
                pod_resources.stop()
                kubelet.stop()


def test_exit_removes_the_files_when_no_container_holds_a_device() -> None:
    """pod-resources answers with no KAE allocation: after SIGTERM's clean stop the view
    directory, the CDI spec and the NFD feature file are gone, and the exit code is 0."""
    with _served(pods=[("default", "web", "main", "example.com/gpu", ["g0"])]) as (files, run):
        assert run.stop() == 0
        assert [f for f in files if f.exists()] == []


def test_exit_keeps_the_files_while_a_container_holds_a_device() -> None:
    """A container holds an hpre device: the view, the CDI spec and the NFD file stay, since a
    restarted container is handed the same answer and running ones have the view mounted."""
    held: list[Assignment] = [("default", "app", "main", HPRE, ["0000:79:00.0"])]
    with _served(pods=held) as (files, run):
        assert run.stop() == 0
        assert [f for f in files if not f.exists()] == []


def test_exit_keeps_the_files_when_the_kubelet_cannot_say() -> None:
    """No pod-resources socket: whether a container holds a device is unknown, so every file
    stays."""
    with _served(pods=None) as (files, run):
        assert run.stop() == 0
        assert [f for f in files if not f.exists()] == []
