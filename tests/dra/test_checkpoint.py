"""The DRA checkpoint: round trip, strict refusals, and writes that never lose the old file."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kae_deviceplugin.dra import checkpoint_format as checkpoint
from kae_deviceplugin.dra.checkpoint import (
    Checkpoint,
    CheckpointFile,
    PreparedClaim,
    PreparedDevice,
    encode,
)
from kae_deviceplugin.errors import CheckpointCorrupt, CheckpointTooNew

REPO = Path(__file__).resolve().parents[2]


def _claim(uid: str, devices: int = 1) -> PreparedClaim:
    return PreparedClaim(
        uid=uid,
        namespace="team-a",
        name=f"claim-{uid}",
        devices=tuple(
            PreparedDevice(
                "hpre",
                "worker-1",
                f"hpre-0000-79-00-{k}",
                None if k else "share-0",
                None if k else 8,
            )
            for k in range(devices)
        ),
        cdi_spec=f"kae.openfuyao.com-{uid}.json",
    )


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    """What is saved loads back equal, in a 0600 file that says its version."""
    store = CheckpointFile(tmp_path)
    saved = Checkpoint().with_claim(_claim("u1", 2)).with_claim(_claim("u2"))
    store.save(saved)
    assert store.load() == saved
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    document = json.loads(store.path.read_text())
    assert document["version"] == 3
    assert document["claims"]["u1"]["devices"][0] == {
        "request": "hpre",
        "pool": "worker-1",
        "device": "hpre-0000-79-00-0",
        "shareID": "share-0",
        "queues": 8,
    }
    assert document["claims"]["u1"]["devices"][1]["queues"] is None
    assert store.load().without_claim("u1") == Checkpoint().with_claim(_claim("u2"))


def test_no_file_is_an_empty_checkpoint(tmp_path: Path) -> None:
    """A node that never prepared a claim has no file, which reads as no claims."""
    assert CheckpointFile(tmp_path / "new").load() == Checkpoint()


def _edited(data: bytes) -> bytes:
    document = json.loads(data)
    document["claims"]["u1"]["name"] = "someone-else"
    return json.dumps(document).encode()


def _reshaped(data: bytes) -> bytes:
    # A wrong shape with a matching checksum: only the shape check can catch it.
    from kae_deviceplugin.dra import checkpoint_format as checkpoint

    claims = {"u1": {"namespace": "n", "name": 3, "cdiSpec": "s", "devices": []}}
    return json.dumps(
        {"version": 2, "checksum": checkpoint._checksum(claims), "claims": claims}
    ).encode()


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda data: b"\xff\xfe garbage", "not JSON"),
        (lambda data: data[: len(data) // 2], "not JSON"),
        (lambda data: b"[]", "not a JSON object"),
        (lambda data: data.replace(b'"version": 3', b'"version": "3"'), "no valid version"),
        (lambda data: data.replace(b'"version": 3', b'"version": true'), "no valid version"),
        (lambda data: data.replace(b'"queues": 8', b'"queues": -8'), "checksum mismatch"),
        (_edited, "checksum mismatch"),
        (_reshaped, "unexpected content"),
    ],
)
def test_a_damaged_file_is_refused_naming_it(tmp_path: Path, damage: object, words: str) -> None:
    """Garbage, a truncated file, a hand edit or a wrong shape: CheckpointCorrupt with the
    path, never an empty checkpoint (which would forget prepared claims)."""
    store = CheckpointFile(tmp_path)
    store.save(Checkpoint().with_claim(_claim("u1")))
    assert callable(damage)
    store.path.write_bytes(damage(store.path.read_bytes()))
    with pytest.raises(CheckpointCorrupt) as caught:
        store.load()
    assert str(store.path) in str(caught.value) and words in str(caught.value)


def test_a_newer_version_is_refused_as_such(tmp_path: Path) -> None:
    """A file from a newer daemon is CheckpointTooNew, saying which version and what to do."""
    store = CheckpointFile(tmp_path)
    document = json.loads(encode(Checkpoint().with_claim(_claim("u1"))))
    document["version"] = 4
    store.path.write_text(json.dumps(document))
    with pytest.raises(CheckpointTooNew, match="version 4 was written by a newer"):
        store.load()


def test_a_version_1_file_is_read_and_written_again_as_version_3(tmp_path: Path) -> None:
    """The first format (no queues) loads with no queues; the next save writes version 3
    with the same claims, so an upgraded daemon keeps every claim the old one prepared."""
    claims = {
        "u1": {
            "namespace": "team-a",
            "name": "claim-u1",
            "cdiSpec": "openfuyao.com-kae_u1.json",
            "devices": [
                {"request": "r", "pool": "p", "device": "zip-0000-75-00-0", "shareID": None}
            ],
        }
    }
    old = {"version": 1, "checksum": checkpoint._checksum(claims), "claims": claims}
    store = CheckpointFile(tmp_path)
    store.path.write_text(json.dumps(old))
    loaded = store.load()
    assert loaded.claims["u1"].devices == (PreparedDevice("r", "p", "zip-0000-75-00-0"),)
    store.save(loaded.with_claim(_claim("u2")))
    document = json.loads(store.path.read_text())
    assert document["version"] == 3
    assert document["claims"]["u1"]["devices"][0]["queues"] is None
    assert store.load().claims["u1"] == loaded.claims["u1"]


def test_a_queue_count_that_is_not_a_count_is_refused(tmp_path: Path) -> None:
    """queues must be a whole number or null: anything else is a damaged file."""
    for bad in (-1, "8", True, 1.5):
        claims = {
            "u1": {
                "namespace": "n",
                "name": "c",
                "cdiSpec": "s",
                "devices": [{"request": "r", "pool": "p", "device": "d", "queues": bad}],
            }
        }
        document = {"version": 2, "checksum": checkpoint._checksum(claims), "claims": claims}
        (tmp_path / "checkpoint.json").write_text(json.dumps(document))
        with pytest.raises(CheckpointCorrupt, match="unexpected content"):
            CheckpointFile(tmp_path).load()


_WRITER = textwrap.dedent(
    """
    import resource, signal, sys
    from pathlib import Path
    from kae_deviceplugin.dra.checkpoint import Checkpoint, CheckpointFile, PreparedClaim
    from kae_deviceplugin.dra.checkpoint import PreparedDevice

    # CPython ignores SIGXFSZ (the write then fails with EFBIG); the kernel's default kills.
    if sys.argv[2] == "default":
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    devices = tuple(PreparedDevice("r", "p", f"d{k}") for k in range(200))
    checkpoint = Checkpoint()
    for k in range(20):
        checkpoint = checkpoint.with_claim(PreparedClaim(f"u{k}", "ns", "n", devices, "s"))
    try:
        CheckpointFile(Path(sys.argv[1])).save(checkpoint)
    except OSError as err:
        print(err.errno)
    """
)


def _write_torn(directory: Path, sigxfsz: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WRITER, str(directory), sigxfsz],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=60,
    )


def test_a_writer_killed_mid_write_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    """The kernel kills the writer (SIGXFSZ) after 4 KiB of a larger file: the old checkpoint
    still loads whole, the torn bytes sit only in the temporary file, and the next save
    succeeds over that leftover."""
    store = CheckpointFile(tmp_path)
    before = Checkpoint().with_claim(_claim("u1"))
    store.save(before)
    result = _write_torn(tmp_path, "default")
    assert result.returncode == -signal.SIGXFSZ, result.stderr
    leftovers = [p for p in tmp_path.iterdir() if p.name != store.name]
    assert [p.stat().st_size for p in leftovers] == [4096]  # the write really was torn
    assert store.load() == before
    after = before.with_claim(_claim("u2"))
    store.save(after)
    assert store.load() == after
    assert [p.name for p in tmp_path.iterdir()] == [store.name]


def test_a_failed_write_raises_and_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    """With the write failing (EFBIG) instead of killing the process, save raises, the old
    checkpoint is intact and no temporary file is left behind."""
    store = CheckpointFile(tmp_path)
    before = Checkpoint().with_claim(_claim("u1"))
    store.save(before)
    result = _write_torn(tmp_path, "ignore")
    assert result.returncode == 0 and result.stdout.strip() == str(27), result.stderr  # EFBIG
    assert store.load() == before
    assert [p.name for p in tmp_path.iterdir()] == [store.name]


def test_a_planted_symlink_is_replaced_not_followed(tmp_path: Path) -> None:
    """A symlink where the checkpoint goes is replaced by the file; its target is untouched."""
    target = tmp_path / "elsewhere"
    target.write_text("precious")
    store = CheckpointFile(tmp_path / "plugin")
    store.directory.mkdir()
    store.path.symlink_to(target)
    store.save(Checkpoint().with_claim(_claim("u1")))
    assert target.read_text() == "precious"
    assert not store.path.is_symlink()
    assert store.load() == Checkpoint().with_claim(_claim("u1"))
