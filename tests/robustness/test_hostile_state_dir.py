"""Hostile files where the daemon writes: its state dir, the container view, the CDI dir.

Each test plants what an attacker with write access to one of those directories (or a fault)
leaves there, then asks the running daemon to act on it: nothing outside is followed or deleted,
what is in the way is replaced, and a view that cannot be written is reported, not handed out.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from kae_deviceplugin.container.sysfs_view import VIEW_DIR_NAME
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.observability.nfd import FeatureFile
from kae_deviceplugin.testing.sysfs_builder import set_attribute
from tests.support.harness import DEADLINE, running_node, short_tmpdir
from tests.support.observability_harness import ObservedNode, observed_node, wait_until

HPRE = "openfuyao.com/kae.hpre"
LABEL = "feature.node.kubernetes.io/kae.present"


def view_links(view: Path) -> dict[str, str]:
    """Name -> target of every symlink in the view directory."""
    return {p.name: os.readlink(p) for p in view.iterdir() if p.is_symlink()}


def expected_links(inventory: Inventory) -> dict[str, str]:
    return {d.name: f"/run/kae/pci/{d.pci_address}/uacce/{d.name}" for d in inventory.devices}


def next_tick(node: ObservedNode) -> None:
    """Ask for a rescan and wait until the scan loop has ticked after it."""
    before = node.daemon.heartbeats.last.get("scan", 0.0)
    node.runner.rescan()
    assert wait_until(lambda: node.daemon.heartbeats.last.get("scan", 0.0) > before)


def allocate_error(node: ObservedNode, device_id: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        node.kubelet.allocate(HPRE, [device_id])
    return caught.value


def victim_dir(workdir: Path) -> Path:
    """A directory standing for the kubelet's device-plugins dir: files that must survive."""
    victim = workdir / "victim"
    victim.mkdir()
    for name in ("kubelet.sock", "other-plugin.sock", "notes"):
        (victim / name).write_text(name)
    return victim


def test_a_symlinked_view_directory_is_refused_and_its_target_untouched() -> None:
    """uacce-class -> another directory: nothing there is deleted or written; /readyz and
    Allocate name the refused view until the symlink is gone, then the view comes back."""
    with observed_node("kunpeng920-2p") as node:
        assert node.wait_registered()
        view = node.daemon.settings.state_dir / VIEW_DIR_NAME
        victim = victim_dir(node.workdir)
        shutil.rmtree(view)
        view.symlink_to(victim)
        next_tick(node)
        assert wait_until(lambda: node.daemon.front.container_files.problem), (
            "the symlinked view went unnoticed"
        )
        assert sorted(p.name for p in victim.iterdir()) == [
            "kubelet.sock",
            "notes",
            "other-plugin.sock",
        ]
        status, _, body = node.get("/readyz")
        assert status == 503 and str(view) in body.decode() and "symlink" in body.decode()
        error = allocate_error(node, "0000:79:00.0")
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert str(view) in (error.details() or "")
        view.unlink()
        next_tick(node)
        assert wait_until(lambda: node.get("/readyz")[0] == 200)
        assert view_links(view) == expected_links(node.daemon.inventory)
        assert node.kubelet.allocate(HPRE, ["0000:79:00.0"]).container_responses


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user owns needs root")
def test_a_view_directory_owned_by_someone_else_is_refused() -> None:
    """A foreign uacce-class (not ours: planted by another user) is neither emptied nor used."""
    with observed_node("kunpeng920-2p") as node:
        assert node.wait_registered()
        view = node.daemon.settings.state_dir / VIEW_DIR_NAME
        shutil.rmtree(view)
        view.mkdir()
        (view / "their-file").write_text("keep me")
        os.chown(view, 65534, 65534)
        next_tick(node)
        problem = wait_until(lambda: node.daemon.front.container_files.problem)
        assert problem and str(view) in problem and "owned by uid 65534" in problem
        assert [p.name for p in view.iterdir()] == ["their-file"]


def test_a_stray_entry_in_the_view_is_replaced_not_fatal() -> None:
    """A directory where a link belongs, a stray file and a non-empty directory: every
    container's view is complete again at the next tick, and nothing else is left."""
    with running_node("kunpeng920-2p") as node:
        assert node.wait_registered()
        view = node.daemon.settings.state_dir / VIEW_DIR_NAME
        wanted = expected_links(node.daemon.inventory)
        first = sorted(wanted)[0]
        (view / first).unlink()
        (view / first).mkdir()
        (view / first / "inner").write_text("x")
        (view / "aaa-stray").mkdir()
        (view / f".{first}.tmp").mkdir()
        (view / "stray-file").write_text("x")
        node.runner.rescan()
        assert wait_until(
            lambda: view_links(view) == wanted and len(list(view.iterdir())) == len(wanted)
        )
        assert node.daemon.front.container_files.problem is None


def test_a_state_dir_that_is_a_file_makes_the_daemon_not_ready() -> None:
    """The state dir replaced by a regular file: /readyz 503 naming the view, Allocate
    FAILED_PRECONDITION; once the file is gone the daemon is ready and allocates again."""
    with observed_node("kunpeng920-2p") as node:
        assert node.wait_registered()
        assert wait_until(lambda: node.get("/readyz")[0] == 200)
        state = node.daemon.settings.state_dir
        shutil.rmtree(state)
        state.write_text("not a directory")
        next_tick(node)
        view = str(state / VIEW_DIR_NAME)
        assert wait_until(lambda: node.get("/readyz")[0] == 503)
        assert view in node.get("/readyz")[2].decode()
        error = allocate_error(node, "0000:79:00.0")
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION and view in (
            error.details() or ""
        )
        state.unlink()
        next_tick(node)
        assert wait_until(lambda: node.get("/readyz")[0] == 200)
        assert node.kubelet.allocate(HPRE, ["0000:79:00.0"]).container_responses


@contextlib.contextmanager
def released_fifo(path: Path) -> Iterator[None]:
    """Plant a FIFO at ``path``; afterwards open it for writing once, so a reader stuck in
    open() (the defect this guards against) is let go instead of hanging the test process."""
    os.mkfifo(path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def test_a_fifo_planted_as_the_cdi_spec_neither_blocks_nor_is_fed() -> None:
    """A FIFO in place of the CDI spec file: the daemon's loop keeps going (a health change
    reaches the kubelet) and the FIFO is replaced with the real spec, a regular file."""
    with (
        short_tmpdir() as cdi_dir,
        running_node("kunpeng920-2p", cdi=True, cdi_dir=cdi_dir) as node,
    ):
        assert node.wait_registered()
        spec = node.daemon.settings.cdi_dir / "openfuyao.com-kae.json"
        assert spec.is_file()
        spec.unlink()
        with released_fifo(spec):
            set_attribute(node.root, "hisi_hpre-2", "isolate", "1")
            node.runner.rescan()
            assert node.wait_view(
                HPRE, lambda view: view.get("0000:79:00.0", ("",))[0] == "Unhealthy", DEADLINE
            ), "the event loop is stuck"
            assert wait_until(lambda: spec.is_file() and not spec.is_symlink())
            assert '"openfuyao.com/kae"' in spec.read_text()


def test_a_symlink_planted_as_the_cdi_spec_is_replaced_not_followed() -> None:
    """The spec path made a symlink to a file elsewhere: that file keeps its content and the
    spec becomes a regular file of ours."""
    with (
        short_tmpdir() as cdi_dir,
        running_node("kunpeng920-2p", cdi=True, cdi_dir=cdi_dir) as node,
    ):
        assert node.wait_registered()
        spec = node.daemon.settings.cdi_dir / "openfuyao.com-kae.json"
        elsewhere = node.workdir / "elsewhere.json"
        elsewhere.write_text(spec.read_text())  # the same content: nothing to rewrite if followed
        spec.unlink()
        spec.symlink_to(elsewhere)
        set_attribute(node.root, "hisi_hpre-2", "isolate", "1")
        node.runner.rescan()
        assert wait_until(lambda: not spec.is_symlink()), "the planted symlink was trusted"
        assert spec.is_file()


def test_a_fifo_planted_as_the_nfd_file_is_replaced(tmp_path: Path) -> None:
    """A FIFO in place of NFD's feature file: the update neither hangs on it nor writes into
    it; the FIFO is replaced by a regular 0644 file holding the labels."""
    path = tmp_path / "kae"
    result: list[bool] = []
    with released_fifo(path):
        worker = threading.Thread(
            target=lambda: result.append(FeatureFile(path).update({LABEL: "true"})), daemon=True
        )
        worker.start()
        worker.join(DEADLINE)
        assert result == [True], "the update hung on the FIFO"
    assert path.is_file() and LABEL in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
