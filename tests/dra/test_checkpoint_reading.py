"""Only an absent checkpoint is an empty one: every other way of not being readable as a
regular file refuses, in one line naming the file, and the file's format carries what two
instances need to agree on an unprepare (version 3: generation and tombstones)."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from kae_deviceplugin.dra import checkpoint_format as checkpoint
from kae_deviceplugin.dra.checkpoint import (
    TOMBSTONE_TTL,
    Checkpoint,
    CheckpointFile,
    PreparedClaim,
    PreparedDevice,
    Tombstone,
)
from kae_deviceplugin.errors import CheckpointCorrupt, CheckpointUnreadable

DEADLINE = 10.0


def _claim(uid: str) -> PreparedClaim:
    device = PreparedDevice("hpre", "worker-1", "hpre-0000-79-00-0")
    return PreparedClaim(uid, "team-a", f"claim-{uid}", (device,), f"spec-{uid}.json")


def _saved(directory: Path) -> CheckpointFile:
    store = CheckpointFile(directory)
    store.save(Checkpoint().with_claim(_claim("u1")).with_claim(_claim("u2")))
    return store


def _symlink(store: CheckpointFile) -> str:
    kept = store.directory.parent / "kept.json"
    store.path.rename(kept)
    store.path.symlink_to(kept)
    return "a symlink is in its place"


def _fifo(store: CheckpointFile) -> str:
    store.path.unlink()
    os.mkfifo(store.path)
    return "not a regular file (a FIFO)"


def _directory(store: CheckpointFile) -> str:
    store.path.unlink()
    store.path.mkdir()
    (store.path / "inside").write_text("x")
    return "not a regular file (a directory)"


PLANTS: list[Callable[[CheckpointFile], str]] = [_symlink, _fifo, _directory]


def _in_time(read: Callable[[], object]) -> BaseException | None:
    """What ``read`` raised, run in a thread that must end within the deadline (a FIFO opened
    for reading without O_NONBLOCK would block it forever)."""
    caught: list[BaseException | None] = []

    def run() -> None:
        try:
            read()
            caught.append(None)
        except BaseException as err:  # handed to the test thread
            caught.append(err)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(DEADLINE)
    assert caught, "the read blocked"
    return caught[0]


@pytest.mark.parametrize("plant", PLANTS)
def test_a_checkpoint_that_is_no_regular_file_is_refused_not_empty(
    tmp_path: Path, plant: Callable[[CheckpointFile], str]
) -> None:
    """A symlink, a FIFO or a directory where checkpoint.json was: load (the driver) and
    read_only (doctor, list) both raise CheckpointUnreadable naming the file and what is in
    its place, at once (a FIFO is not waited on), and nothing is followed or changed."""
    store = _saved(tmp_path / "plugin")
    (tmp_path / "plugin").chmod(0o755)
    words = plant(store)
    before = sorted(p.name for p in store.directory.iterdir())
    for read in (store.load, store.read_only, CheckpointFile(store.directory).load):
        err = _in_time(read)
        assert isinstance(err, CheckpointUnreadable), err
        assert str(store.path) in str(err) and words in str(err) and "\n" not in str(err)
    with pytest.raises(CheckpointUnreadable, match=re.escape(words)):
        store.check()
    assert sorted(p.name for p in store.directory.iterdir()) == before
    kept = tmp_path / "kept.json"
    if kept.exists():
        assert len(checkpoint.decode(kept.read_bytes(), "kept").claims) == 2


def test_only_an_absent_file_is_an_empty_checkpoint(tmp_path: Path) -> None:
    """No file: empty for load, read_only and check alike."""
    store = CheckpointFile(tmp_path / "plugin")
    assert store.read_only() == Checkpoint()
    store.check()
    assert store.load() == Checkpoint()
    store.check()


def test_json_nested_too_deep_is_a_corrupt_checkpoint_in_one_line(tmp_path: Path) -> None:
    """100,000 nested arrays make json.loads raise RecursionError: that is CheckpointCorrupt
    naming the file, never a traceback."""
    store = CheckpointFile(tmp_path)
    store.path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    for read in (store.load, store.read_only):
        with pytest.raises(CheckpointCorrupt, match="nested too deep") as caught:
            read()
        assert str(store.path) in str(caught.value)


def test_a_plugin_directory_replaced_while_running_is_refused(tmp_path: Path) -> None:
    """The directory moved away and another (empty) one made at its path, or a symlink to
    the moved one put there: the same CheckpointFile refuses both, rather than reading the
    empty one as no claims or following the link; and writes nothing through either."""
    directory = tmp_path / "plugin"
    store = _saved(directory)
    assert len(store.load().claims) == 2
    directory.rename(tmp_path / "moved")
    directory.mkdir()
    with pytest.raises(CheckpointUnreadable, match="replaced by another directory"):
        store.load()
    with pytest.raises(CheckpointUnreadable, match="replaced by another directory"):
        store.check()
    with pytest.raises(OSError, match="replaced by another directory"):
        store.save(Checkpoint())
    assert list(directory.iterdir()) == []
    directory.rmdir()
    with pytest.raises(CheckpointUnreadable, match="or removed"):
        store.check()
    directory.symlink_to(tmp_path / "moved")
    with pytest.raises(CheckpointUnreadable, match="symlink"):
        store.load()
    with pytest.raises(CheckpointUnreadable, match="symlink"):
        store.check()
    with pytest.raises(OSError, match="symlink"):
        store.save(Checkpoint())
    assert len(CheckpointFile(tmp_path / "moved").load().claims) == 2


def test_a_version_2_file_is_read_as_generation_0_without_tombstones(tmp_path: Path) -> None:
    """The previous format loads whole (claims and queues), at generation 0; the next write
    is version 3 at generation 1 with the same claims."""
    claims = json.loads(checkpoint.encode(Checkpoint().with_claim(_claim("u1"))))["claims"]
    old = {"version": 2, "checksum": checkpoint._checksum(claims), "claims": claims}
    store = CheckpointFile(tmp_path)
    store.path.write_text(json.dumps(old))
    loaded = store.load()
    assert loaded == Checkpoint({"u1": _claim("u1")})
    store.save(loaded.next_write(1_000))
    document = json.loads(store.path.read_text())
    assert (document["version"], document["generation"]) == (3, 1)
    assert store.load().claims == loaded.claims


def test_tombstones_round_trip_and_are_checksummed(tmp_path: Path) -> None:
    """Generation, tombstones and the pruned mark load back as saved; editing a tombstone
    is a checksum mismatch (the checksum covers them from version 3)."""
    store = CheckpointFile(tmp_path)
    saved = Checkpoint({"u1": _claim("u1")}, 7, {"u9": Tombstone(6, 1_000)}, 3)
    store.save(saved)
    assert store.load() == saved
    document = json.loads(store.path.read_text())
    document["unprepared"]["u9"]["generation"] = 1
    store.path.write_text(json.dumps(document))
    with pytest.raises(CheckpointCorrupt, match="checksum mismatch"):
        store.load()


def test_tombstones_are_pruned_by_age_and_by_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write drops tombstones older than the TTL and keeps at most MAX_TOMBSTONES (the
    newest; 16 here); ``forgotten`` becomes the newest generation dropped, so a prepare that
    began before it is refused rather than wrongly allowed."""
    monkeypatch.setattr(checkpoint, "MAX_TOMBSTONES", 16)
    now = 100_000
    state = Checkpoint(generation=10)
    state = state.unprepared_now(["old"], now - TOMBSTONE_TTL - 1)
    state = state.next_write(now)
    assert state.unprepared == {} and state.forgotten == 11 and state.generation == 11
    assert state.overtaken("anything", seen=10) and not state.overtaken("anything", seen=11)
    for k in range(16 + 5):
        state = state.unprepared_now([f"u{k}"], now).next_write(now)
    assert len(state.unprepared) == 16
    assert "u4" not in state.unprepared and "u20" in state.unprepared
    assert state.forgotten == state.unprepared[f"u{5}"].generation - 1
