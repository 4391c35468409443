"""What a prepare makes durable before it answers: the checkpoint, fsynced with its directory,
and nothing else. A claim's CDI spec is written atomically but not fsynced; what a power cut
can leave of it (nothing, or an empty file) is written again from the checkpoint, at start and
by the kubelet's prepare after a reboot."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kae_deviceplugin.container import safe_fs
from kae_deviceplugin.dra.prepare_times import PREFIX
from tests.dra.node import HPRE_0, POOL, Node, add_claim, build_node
from tests.support.dra_claims import Result


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return build_node(tmp_path)


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path of every file or directory fsynced from here on."""
    paths: list[str] = []
    real: Callable[[int], None] = os.fsync

    def recording(fd: int) -> None:
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return paths


def test_prepare_fsyncs_the_checkpoint_and_its_directory_only(
    node: Node, fsynced: list[str]
) -> None:
    """A new claim costs two fsyncs, both the checkpoint's (its temporary file, then the
    plugin directory holding the rename); none touches the CDI directory."""
    claim = add_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    before = safe_fs.FSYNCS.calls
    answer = asyncio.run(node.preparer().prepare([claim]))[claim.uid]
    assert answer.error == "" and node.spec_path(claim.uid).is_file()
    directory = str(node.checkpoint.directory)
    assert len(fsynced) == 2, fsynced
    assert Path(fsynced[0]).parent == node.checkpoint.directory
    assert Path(fsynced[0]).name.startswith(".checkpoint.json.")
    assert fsynced[1] == directory
    assert not any(p.startswith(str(node.cdi_dir)) for p in fsynced)
    assert safe_fs.FSYNCS.calls - before == 2


@pytest.mark.parametrize("damage", ["emptied", "lost"])
def test_a_spec_a_power_cut_damaged_is_written_again(node: Node, damage: str) -> None:
    """An unsynced spec may come back empty or not at all: the start's reconcile writes it
    again from the checkpoint, and so does the kubelet's prepare after the reboot."""
    claim = add_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    asyncio.run(node.preparer().prepare([claim]))
    path = node.spec_path(claim.uid)
    good = path.read_bytes()
    for repair in ("reconcile", "prepare"):
        path.write_bytes(b"") if damage == "emptied" else path.unlink()
        preparer = node.preparer()
        if repair == "reconcile":
            assert asyncio.run(preparer.reconcile()).rewritten == (claim.uid,)
        else:
            assert asyncio.run(preparer.prepare([claim]))[claim.uid].error == ""
        assert path.read_bytes() == good


def test_prepare_logs_where_its_time_went(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """One info line per call names its claims and its parts, the fsyncs counted."""
    claim = add_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    with caplog.at_level(logging.INFO, logger="kae_deviceplugin.dra.prepare"):
        asyncio.run(node.preparer().prepare([claim]))
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith(PREFIX)]
    assert line.startswith(f"{PREFIX} {claim.uid}: ")
    for part in ("claim read", "lock", "CDI spec", "checkpoint", "2 fsyncs"):
        assert part in line, line
