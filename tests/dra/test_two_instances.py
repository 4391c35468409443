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
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.dra import checkpoint_format as checkpoint
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


def _api_get(node: Node, refuse: set[str], bare: frozenset[str] = frozenset()) -> Any:
    """The claim store as the API client answers: a deleted claim is a 404 whose Status names
    it (as the API server's is), ``refuse`` a 503, ``bare`` a 404 naming nothing (what an API
    server that does not serve resource.k8s.io/v1 answers)."""

    async def get(namespace: str, name: str) -> Mapping[str, Any]:
        if name in refuse:
            raise ApiError("get resourceclaims: unavailable", status=503)
        if name in bare:
            raise ApiError("the server could not find the requested resource", status=404,
                           reason="NotFound", details={})  # fmt: skip
        try:
            return await node.store.get(namespace, name)
        except ClaimNotFound as err:
            details = {"name": name, "group": "resource.k8s.io", "kind": "resourceclaims"}
            raise ApiError(str(err), status=404, reason="NotFound", details=details) from None

    return get


def test_the_sweep_collects_only_claims_the_api_server_proves_gone(node: Node) -> None:
    """Eight recorded claims: deleted (a 404 naming it), re-created under its name (another
    UID), deallocated with no pod reserving it; and kept: a 404 naming nothing (no such API),
    no answer (503), alive, deallocated but still reserved by a pod, an answer that is some
    other object. The first sweep collects nothing and says which three it will collect; the
    second collects those three and keeps the others with their specs; an orphan spec goes."""
    preparer = node.preparer()
    names = ("deleted", "recreated", "deallocated", "no-api", "unknown", "alive", "reserved",
             "odd")  # fmt: skip
    refs = {name: add_claim(node, name, Result("hpre", HPRE_0, POOL)) for name in names}
    asyncio.run(preparer.prepare(list(refs.values())))
    node.store.delete("team-a", "deleted")
    node.store.delete("team-a", "recreated")
    add_claim(node, "recreated", Result("hpre", HPRE_0, POOL))  # a new UID
    node.store.claims[("team-a", "deallocated")]["status"] = {}
    node.store.claims[("team-a", "reserved")]["status"] = {
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}]
    }
    node.store.claims[("team-a", "odd")] = {"kind": "Status", "metadata": {}}
    orphan = node.spec_path("0d1e5e57-aaaa-4bbb-8ccc-000000000000")
    orphan.write_text("{}")
    sweeper = StaleClaimSweeper(preparer, _api_get(node, {"unknown"}, frozenset({"no-api"})))
    gone = {refs["deleted"].uid, refs["recreated"].uid, refs["deallocated"].uid}
    first = asyncio.run(sweeper.sweep())
    assert first.claims == () and set(first.pending) == gone
    assert set(node.checkpoint.load().claims) == {r.uid for r in refs.values()}
    assert not orphan.exists()
    second = asyncio.run(sweeper.sweep())
    assert set(second.claims) == gone and second.pending == ()
    assert set(node.checkpoint.load().claims) == {r.uid for r in refs.values()} - gone
    assert all(node.spec_path(r.uid).exists() == (r.uid not in gone) for r in refs.values())


def test_a_claim_seen_alive_between_two_sweeps_is_not_collected(node: Node) -> None:
    """Proven gone once, then answered for (the API server's answer changed): the verdict is
    dropped and a later sweep must prove it twice again."""
    preparer = node.preparer()
    claim = add_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    asyncio.run(preparer.prepare([claim]))
    saved = node.store.claims.pop(("team-a", "c1"))
    sweeper = StaleClaimSweeper(preparer, _api_get(node, set()))
    assert asyncio.run(sweeper.sweep()).pending == (claim.uid,)
    node.store.add(saved)
    assert asyncio.run(sweeper.sweep()) == asyncio.run(sweeper.sweep())
    node.store.delete("team-a", "c1")
    assert asyncio.run(sweeper.sweep()).claims == ()
    assert asyncio.run(sweeper.sweep()).claims == (claim.uid,)


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


def _gated(node: Node) -> tuple[Any, asyncio.Event, asyncio.Event]:
    """A claim read that waits for ``release`` after saying it began (``reading``)."""
    reading, release = asyncio.Event(), asyncio.Event()

    async def slow_get(namespace: str, name: str) -> Mapping[str, Any]:
        reading.set()
        await release.wait()
        return await node.store.get(namespace, name)

    return slow_get, reading, release


def test_an_unprepare_on_the_other_instance_during_the_read_leaves_nothing(node: Node) -> None:
    """A rolling update: the kubelet's prepare reached the old instance, which is reading the
    claim from the API server, when its unprepare reaches the new one. The old instance's
    prepare is refused and records nothing: no record, no spec (the overtake is seen through
    the checkpoint's tombstone, not one process's memory)."""
    claim = add_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    old, new = node.preparer(), node.preparer()
    old.get_claim, reading, release = _gated(node)

    async def main() -> None:
        prepare = asyncio.create_task(old.prepare([claim]))
        await reading.wait()
        assert await new.unprepare([claim]) == {claim.uid: ""}
        release.set()
        answer = (await prepare)[claim.uid]
        assert "unprepared while being read" in answer.error

    asyncio.run(main())
    assert node.checkpoint.load().claims == {}
    assert not node.spec_path(claim.uid).exists()


_UNPREPARER = """
import asyncio, sys
from pathlib import Path
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra.checkpoint import CheckpointFile
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.dra.prepare import ClaimPreparer

async def never(namespace, name):
    raise AssertionError("an unprepare reads no claim")

plugin, cdi, namespace, name, uid = sys.argv[1:]
preparer = ClaimPreparer(pool="worker-1", inventory=Inventory, policy=lambda: None,
                         get_claim=never, checkpoint=CheckpointFile(Path(plugin)),
                         cdi_dir=Path(cdi))
print(asyncio.run(preparer.unprepare([ClaimRef(namespace, name, uid)])), flush=True)
"""


def test_an_unprepare_by_another_process_during_the_read_leaves_nothing(node: Node) -> None:
    """The same with the unprepare in a second process (its own interpreter, lock descriptor
    and memory), as two driver pods are: the prepare still records nothing."""
    claim = add_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    preparer = node.preparer()
    preparer.get_claim, reading, release = _gated(node)

    async def main() -> None:
        prepare = asyncio.create_task(preparer.prepare([claim]))
        await reading.wait()
        args = [str(node.root / "plugin"), str(node.cdi_dir), claim.namespace, claim.name]
        other = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _UNPREPARER, *args, claim.uid,
            stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2],
        )  # fmt: skip
        out, _ = await asyncio.wait_for(other.communicate(), DEADLINE * 3)
        assert other.returncode == 0 and out.decode().strip() == repr({claim.uid: ""})
        release.set()
        answer = (await prepare)[claim.uid]
        assert "unprepared while being read" in answer.error

    asyncio.run(main())
    assert node.checkpoint.load().claims == {}
    assert not node.spec_path(claim.uid).exists()


def test_a_prepare_after_an_unprepare_is_not_mistaken_for_one_overtaken(node: Node) -> None:
    """The kubelet unprepares a claim on one instance and later prepares it again on the
    other: the tombstone predates the prepare's read, so the claim is prepared."""
    claim = add_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    old, new = node.preparer(), node.preparer()

    async def main() -> None:
        assert not (await old.prepare([claim]))[claim.uid].error
        assert await new.unprepare([claim]) == {claim.uid: ""}
        assert (await old.prepare([claim]))[claim.uid].error == ""

    asyncio.run(main())
    assert set(node.checkpoint.load().claims) == {claim.uid}
    assert node.spec_path(claim.uid).is_file()


def test_the_unprepare_record_stays_bounded_over_many_claims(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """5,000 claims unprepared in 50 calls (a storm): the tombstones in the file and in
    memory never exceed MAX_TOMBSTONES (64 here), and those older than the TTL go at the next
    write; no per-claim memory is kept besides."""
    monkeypatch.setattr(checkpoint, "MAX_TOMBSTONES", 64)
    now = [1_000_000.0]
    preparer = node.preparer()
    preparer.clock = lambda: now[0]

    async def main() -> None:
        for call in range(50):
            refs = [ClaimRef("team-a", f"c{call}-{k}", f"u-{call}-{k}") for k in range(100)]
            assert set((await preparer.unprepare(refs)).values()) == {""}
            assert len(preparer.state.unprepared) <= 64
        now[0] += checkpoint.TOMBSTONE_TTL + 1
        await preparer.unprepare([ClaimRef("team-a", "last", "u-last")])

    asyncio.run(main())
    on_disk = node.checkpoint.load()
    assert set(on_disk.unprepared) == {"u-last"} == set(preparer.state.unprepared)
    assert on_disk.generation == 51 and on_disk.forgotten == 50
    assert not any(isinstance(v, Counter) for v in vars(preparer).values())


def test_a_uid_under_another_name_never_rewrites_its_record(node: Node) -> None:
    """A prepare naming a recorded UID with another namespace/name is refused in one line
    naming both, and the record keeps the original name; an unprepare so named leaves the
    record and its spec alone."""
    claim = add_claim(node, "original", Result("hpre", HPRE_0, POOL))
    preparer = node.preparer()
    asyncio.run(preparer.prepare([claim]))
    impostor = ClaimRef("team-b", "impostor", claim.uid)
    error = asyncio.run(preparer.prepare([impostor]))[claim.uid].error
    assert "team-b/impostor" in error and "team-a/original" in error and "\n" not in error
    assert asyncio.run(node.preparer().unprepare([impostor])) == {claim.uid: ""}
    recorded = node.checkpoint.load().claims[claim.uid]
    assert (recorded.namespace, recorded.name) == ("team-a", "original")
    assert node.spec_path(claim.uid).is_file()
