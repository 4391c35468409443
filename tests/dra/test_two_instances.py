"""Two driver instances on one plugin directory (a rolling update's surge), a prepare and an
unprepare of one claim at once, and the sweep of records no unprepare will ever come for.

Each instance is a ``ClaimPreparer`` of its own over the same directories, as two pods are:
its own memory, its own descriptor on ``checkpoint.lock``. ``flock`` locks of two open file
descriptions exclude each other even in one process, and one test holds the lock from a
separate process to show the wait across processes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.dra.prepare import LOCK_NAME
from kae_deviceplugin.dra.stale_claims import StaleClaimSweeper
from kae_deviceplugin.errors import ApiError
from tests.dra.node import HPRE_0, POOL, SEC_0, Node, add_claim, build_node
from tests.support.dra_claims import ClaimNotFound, Result

DEADLINE = 10.0


@pytest.fixture
def node(tmp_path: Path) -> Node:
    built = build_node(tmp_path)
    (tmp_path / "plugin").mkdir()
    return built


def test_a_new_instance_keeps_what_the_old_one_prepared_after_it_started(node: Node) -> None:
    """The new instance starts (reads an empty checkpoint), the old one prepares a claim, then
    the new one's start-up reconcile runs and it prepares a claim of its own: the old claim's
    spec stays and the checkpoint holds both claims (the surge rollout that lost a claim)."""
    old, new = node.preparer(), node.preparer()
    first = add_claim(node, "old-claim", Result("hpre", HPRE_0, POOL))
    second = add_claim(node, "new-claim", Result("sec", SEC_0, POOL))

    async def main() -> None:
        assert not (await old.prepare([first]))[first.uid].error
        reconciled = await new.reconcile()
        assert first.uid not in reconciled.removed
        assert not (await new.prepare([second]))[second.uid].error

    asyncio.run(main())
    assert node.spec_path(first.uid).is_file() and node.spec_path(second.uid).is_file()
    assert set(node.checkpoint.load().claims) == {first.uid, second.uid}


def test_an_unprepare_by_one_instance_is_seen_by_the_other(node: Node) -> None:
    """The old instance unprepares a claim the new one had in memory as prepared: the new one
    does not write the record back with its next change."""
    old, new = node.preparer(), node.preparer()
    first = add_claim(node, "first", Result("hpre", HPRE_0, POOL))
    second = add_claim(node, "second", Result("sec", SEC_0, POOL))

    async def main() -> None:
        await old.prepare([first])
        await new.reconcile()  # new now remembers "first" as prepared
        assert await old.unprepare([first]) == {first.uid: ""}
        await new.prepare([second])

    asyncio.run(main())
    assert set(node.checkpoint.load().claims) == {second.uid}
    assert not node.spec_path(first.uid).exists()


_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""


def test_a_prepare_waits_for_the_lock_another_process_holds(node: Node) -> None:
    """Another process holds checkpoint.lock: the prepare does not finish (nor write a spec)
    until that process lets go, then finishes."""
    preparer = node.preparer()
    claim = add_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(node.root / "plugin" / LOCK_NAME)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline().strip() == "held"

        async def main() -> None:
            call = asyncio.create_task(preparer.prepare([claim]))
            done, _ = await asyncio.wait([call], timeout=0.3)
            assert not done and not node.spec_path(claim.uid).exists()
            holder.stdin.write("go\n")  # type: ignore[union-attr]
            holder.stdin.flush()  # type: ignore[union-attr]
            async with asyncio.timeout(DEADLINE):
                assert not (await call)[claim.uid].error

        asyncio.run(main())
    finally:
        holder.kill()
        holder.communicate()  # closes its pipes too
    assert node.spec_path(claim.uid).is_file()


def test_an_unprepare_during_the_claim_read_leaves_nothing_behind(node: Node) -> None:
    """The kubelet unprepares a claim while its prepare is still reading it from the API
    server: the prepare answers an error and records nothing, and no spec is left."""
    claim = add_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    reading, release = asyncio.Event(), asyncio.Event()

    async def slow_get(namespace: str, name: str) -> Mapping[str, Any]:
        reading.set()
        await release.wait()
        return await node.store.get(namespace, name)

    preparer = node.preparer()
    preparer.get_claim = slow_get

    async def main() -> None:
        prepare = asyncio.create_task(preparer.prepare([claim]))
        await reading.wait()
        assert await preparer.unprepare([claim]) == {claim.uid: ""}
        release.set()
        answer = (await prepare)[claim.uid]
        assert "unprepared while being read" in answer.error

    asyncio.run(main())
    assert node.checkpoint.load().claims == {}
    assert not node.spec_path(claim.uid).exists()


def _api_get(node: Node, refuse: set[str]) -> Any:
    """The claim store as the API client answers: 404 for a deleted claim, 503 for ``refuse``."""

    async def get(namespace: str, name: str) -> Mapping[str, Any]:
        if name in refuse:
            raise ApiError("get resourceclaims: unavailable", status=503)
        try:
            return await node.store.get(namespace, name)
        except ClaimNotFound as err:
            raise ApiError(str(err), status=404, reason="NotFound") from None

    return get


def test_the_sweep_collects_only_claims_the_api_server_says_are_gone(node: Node) -> None:
    """Four recorded claims: one deleted (404), one re-created under its name (another UID),
    one the server does not answer for (503), one alive. The sweep unprepares the first two
    and keeps the others with their specs; an orphan spec goes too."""
    preparer = node.preparer()
    refs = {
        name: add_claim(node, name, Result("hpre", HPRE_0, POOL))
        for name in ("deleted", "recreated", "unknown", "alive")
    }
    asyncio.run(preparer.prepare(list(refs.values())))
    node.store.delete("team-a", "deleted")
    node.store.delete("team-a", "recreated")
    add_claim(node, "recreated", Result("hpre", HPRE_0, POOL))  # a new UID
    orphan = node.spec_path("0d1e5e57-aaaa-4bbb-8ccc-000000000000")
    orphan.write_text("{}")
    sweeper = StaleClaimSweeper(preparer, _api_get(node, {"unknown"}))
    swept = asyncio.run(sweeper.sweep())
    gone = {refs["deleted"].uid, refs["recreated"].uid}
    assert set(swept.claims) == gone
    assert set(node.checkpoint.load().claims) == {refs["unknown"].uid, refs["alive"].uid}
    assert not orphan.exists()
    assert all(node.spec_path(r.uid).exists() == (r.uid not in gone) for r in refs.values())


def test_the_sweep_changes_nothing_while_the_api_server_is_away(node: Node) -> None:
    """Every read fails without an answer: no verdict, nothing removed."""
    preparer = node.preparer()
    claim = add_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    asyncio.run(preparer.prepare([claim]))

    async def away(namespace: str, name: str) -> Mapping[str, Any]:
        raise ApiError("get resourceclaims: API server not reachable")

    swept = asyncio.run(StaleClaimSweeper(preparer, away).sweep())
    assert swept.claims == () and set(node.checkpoint.load().claims) == {claim.uid}


def test_a_claim_ref_for_the_record() -> None:
    """ClaimRef prints as namespace/name (the sweep's log line names claims so)."""
    assert str(ClaimRef("team-a", "c1", "u")) == "team-a/c1"
