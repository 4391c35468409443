"""The real DRA daemon (``serve --mode dra``, the test API server over HTTP) when its state
cannot be trusted: a checkpoint that is no regular file, or nested too deep to parse, at start
or while it runs, and the plugin directory swapped for a symlink. It refuses in one line
(exit 3 at start; each claim's error and /readyz while it runs), and deletes nothing: no CDI
spec removed, no checkpoint rewritten. And shares are checked against what the node publishes
(--shared-engines)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from kae_deviceplugin.dra.api import plugin_dir
from tests.dra.node import HPRE_0, SEC_0
from tests.support.dra_claims import Result, claim_object
from tests.support.dra_kubelet import Claim
from tests.support.dra_process import NODE, DraNode, DraProcess, dra_process
from tests.support.http_apiserver import HttpApiServer

DEADLINE = 10.0
ZIP_0 = "zip-0000-75-00-0"


def _claim(api: HttpApiServer, name: str, *results: Result) -> Claim:
    obj = api.seed("resourceclaims", claim_object("team-a", name, list(results)))
    return Claim("team-a", name, obj["metadata"]["uid"])


def _prepared(api: HttpApiServer, node: DraNode) -> list[Claim]:
    """Two claims prepared by a daemon that then stops (SIGTERM leaves specs and checkpoint)."""
    claims = [
        _claim(api, "c1", Result("hpre", HPRE_0, NODE)),
        _claim(api, "c2", Result("sec", SEC_0, NODE)),
    ]
    with dra_process(node, api) as daemon:
        daemon.register()
        answers = daemon.prepare(claims)
        assert all(a.error == "" for a in answers.values()), answers
        assert daemon.terminate() == 0, daemon.describe()
    assert all(node.spec_path(c.uid).is_file() for c in claims)
    return claims


def _checkpoint(node: DraNode) -> Path:
    return plugin_dir(node.kubelet_root) / "checkpoint.json"


def _symlink(path: Path) -> None:
    kept = path.parent.parent / "kept-checkpoint.json"
    path.rename(kept)
    path.symlink_to(kept)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _deep(path: Path) -> None:
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)


def _cannot_start_lines(daemon: DraProcess) -> list[str]:
    return [line for line in daemon.log_lines() if "cannot start" in line]


@pytest.mark.parametrize(
    ("plant", "words"),
    [
        (_symlink, "a symlink is in its place"),
        (_fifo, "not a regular file (a FIFO)"),
        (_deep, "nested too deep"),
    ],
)
def test_a_checkpoint_not_to_trust_refuses_the_start_and_deletes_nothing(
    api: HttpApiServer, node: DraNode, plant: Callable[[Path], None], words: str
) -> None:
    """The checkpoint swapped for a symlink to a copy, a FIFO, or JSON nested 100,000 deep: the
    daemon exits 3 with one line naming the file and what is wrong (no traceback), before it
    serves; every prepared claim's CDI spec is still there and the planted entry is as it was
    (the reconcile that removes unrecorded specs never ran)."""
    api.seed_node(NODE)
    claims = _prepared(api, node)
    path = _checkpoint(node)
    plant(path)
    planted = os.lstat(path)
    with dra_process(node, api) as daemon:
        assert daemon.wait_for(lambda: not daemon.alive, DEADLINE), daemon.describe()
        assert daemon.process.returncode == 3, daemon.describe()
        [line] = _cannot_start_lines(daemon)
        assert str(path) in line and words in line, line
        assert not any("Traceback" in line for line in daemon.log_lines()), daemon.describe()
    assert all(node.spec_path(c.uid).is_file() for c in claims)
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode, after.st_size) == (
        planted.st_ino,
        planted.st_mode,
        planted.st_size,
    )


def test_a_checkpoint_made_a_fifo_while_running_fails_calls_and_readiness(
    api: HttpApiServer, node: DraNode
) -> None:
    """The daemon serves; its checkpoint is replaced by a FIFO. /readyz turns 503 naming it,
    a new claim's prepare and a prepared claim's unprepare each answer an error naming it,
    and nothing is removed or rewritten: the specs stay, the FIFO stays. With the file back,
    the daemon is ready and serves again."""
    api.seed_node(NODE)
    with dra_process(node, api) as daemon:
        daemon.register()
        assert daemon.wait_ready(), daemon.readyz()
        first = _claim(api, "first", Result("hpre", HPRE_0, NODE))
        assert daemon.prepare([first])[first.uid].error == ""
        path = _checkpoint(node)
        saved = path.read_bytes()
        _fifo(path)
        assert daemon.wait_for(lambda: daemon.readyz()[0] == 503), daemon.readyz()
        body = daemon.readyz()[1]
        assert str(path) in body and "FIFO" in body
        second = _claim(api, "second", Result("sec", SEC_0, NODE))
        error = daemon.prepare([second])[second.uid].error
        assert str(path) in error and "FIFO" in error and "\n" not in error
        error = daemon.unprepare([first])[first.uid]
        assert str(path) in error and "FIFO" in error
        assert node.spec_path(first.uid).is_file() and not node.spec_path(second.uid).exists()
        assert path.is_fifo()
        path.unlink()
        path.write_bytes(saved)
        assert daemon.wait_ready(), daemon.readyz()
        assert daemon.prepare([second])[second.uid].error == ""


def test_the_plugin_directory_swapped_for_a_symlink_is_noticed(
    api: HttpApiServer, node: DraNode
) -> None:
    """The plugin directory moved aside and a symlink to it put at its path while the daemon
    runs: /readyz turns 503 naming the symlink, a prepare through it answers an error, and
    nothing is written through the link (the checkpoint keeps its bytes, no spec is made)."""
    api.seed_node(NODE)
    with dra_process(node, api) as daemon:
        daemon.register()
        assert daemon.wait_ready(), daemon.readyz()
        first = _claim(api, "first", Result("hpre", HPRE_0, NODE))
        assert daemon.prepare([first])[first.uid].error == ""
        directory = plugin_dir(node.kubelet_root)
        moved = node.workdir / "moved"
        directory.rename(moved)
        directory.symlink_to(moved)
        before = (moved / "checkpoint.json").read_bytes()
        assert daemon.wait_for(lambda: daemon.readyz()[0] == 503), daemon.readyz()
        body = daemon.readyz()[1]
        assert str(directory) in body and "symlink" in body
        second = _claim(api, "second", Result("sec", SEC_0, NODE))
        error = daemon.prepare([second])[second.uid].error
        assert str(directory) in error and "symlink" in error
        assert (moved / "checkpoint.json").read_bytes() == before
        assert not node.spec_path(second.uid).exists()


def test_shares_are_refused_beyond_what_the_daemon_publishes(
    api: HttpApiServer, node: DraNode
) -> None:
    """--shared-engines zip: a share of 100,000 queues of a ZIP and a share of an HPRE are
    each refused naming the device and the limit; a share within the published capacity is
    prepared."""
    api.seed_node(NODE)
    share = str(uuid.uuid4())
    with dra_process(node, api, args=["--shared-engines", "zip"]) as daemon:
        daemon.register()
        assert daemon.wait_ready(), daemon.readyz()
        huge = _claim(
            api, "huge", Result("z", ZIP_0, NODE, share_id=share, consumed_queues="100000")
        )
        hpre = _claim(api, "hpre", Result("h", HPRE_0, NODE, share_id=share, consumed_queues="1"))
        small = _claim(api, "small", Result("z", ZIP_0, NODE, share_id=share, consumed_queues="4"))
        answers = daemon.prepare([huge, hpre, small])
        assert ZIP_0 in answers[huge.uid].error and "publishes" in answers[huge.uid].error
        assert "100000" in answers[huge.uid].error
        assert HPRE_0 in answers[hpre.uid].error
        assert "engine hpre is not in dra.sharedEngines" in answers[hpre.uid].error
        assert answers[small.uid].error == ""
        assert not node.spec_path(huge.uid).exists() and not node.spec_path(hpre.uid).exists()


def test_an_unprepare_on_the_other_daemon_overtakes_a_prepare_reading_its_claim(
    api: HttpApiServer, node: DraNode
) -> None:
    """Two real daemons on one node (a rollout). The kubelet's prepare reaches the first while
    the API server holds its claim read; the unprepare of that claim reaches the second and
    answers. When the read comes back, the first daemon's prepare answers an error and records
    nothing: no record in the shared checkpoint, no spec."""
    api.seed_node(NODE)
    claim = _claim(api, "c1", Result("hpre", HPRE_0, NODE))
    with (
        dra_process(node, api, pod_uid="pod-a") as first,
        dra_process(node, api, pod_uid="pod-b") as second,
    ):
        first.register()
        second.register()
        assert first.wait_ready() and second.wait_ready(), (first.readyz(), second.readyz())
        reads = api.faults.count("get", "resourceclaims")
        api.freeze(DEADLINE * 3)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            prepare = pool.submit(first.prepare, [claim])
            assert api.wait_for(
                lambda: api.faults.count("get", "resourceclaims") > reads, DEADLINE
            ), first.describe()
            assert second.unprepare([claim]) == {claim.uid: ""}
            api.thaw()
            answer = prepare.result(DEADLINE * 3)[claim.uid]
        assert "unprepared while being read" in answer.error, answer
        checkpoint = json.loads(_checkpoint(node).read_text())
        assert checkpoint["claims"] == {} and claim.uid in checkpoint["unprepared"]
        assert not node.spec_path(claim.uid).exists()


def test_the_state_dir_swapped_for_a_symlink_is_noticed_before_a_spec_mounts_it(
    api: HttpApiServer, node: DraNode
) -> None:
    """The state dir (whose uacce-class view every claim's spec mounts) moved aside and a
    symlink to it put at its path, with no inventory change to make the daemon write the view
    again: /readyz turns 503 naming the symlink, a new claim is refused with it and gets no
    spec. With the symlink gone, the daemon writes the view again, is ready, and prepares."""
    api.seed_node(NODE)
    with dra_process(node, api) as daemon:
        daemon.register()
        assert daemon.wait_ready(), daemon.readyz()
        first = _claim(api, "first", Result("hpre", HPRE_0, NODE))
        assert daemon.prepare([first])[first.uid].error == ""
        state = node.workdir / "state"
        state.rename(node.workdir / "state-moved")
        state.symlink_to(node.workdir / "state-moved")
        assert daemon.wait_for(lambda: daemon.readyz()[0] == 503), daemon.readyz()
        assert str(state) in daemon.readyz()[1] and "symlink" in daemon.readyz()[1]
        second = _claim(api, "second", Result("sec", SEC_0, NODE))
        error = daemon.prepare([second])[second.uid].error
        assert str(state) in error and "symlink" in error, error
        assert not node.spec_path(second.uid).exists()
        state.unlink()
        assert daemon.wait_ready(), daemon.readyz()
        assert daemon.prepare([second])[second.uid].error == ""
        assert (state / "uacce-class").is_dir() and not state.is_symlink()
