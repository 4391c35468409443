"""NodePrepareResources / NodeUnprepareResources, without gRPC: claims in, answers per claim out.

Prepare reads each claim from the API server (an injected ``get_claim(namespace, name)``),
takes this driver's results for this node's pool, checks every device is on the node and
healthy, writes the claim's CDI spec, records the claim in the checkpoint and only then answers
with the CDI IDs. A claim already in the checkpoint is answered from it without asking the API
server, and its spec is written again: after a reboot the kubelet prepares again and the spec
(on a tmpfs, or cleaned) may be gone. Unprepare needs the checkpoint only (the claim may be
deleted by then); an unknown claim is success. Every claim asked gets an answer, its own error
included: one bad claim never fails the others.

Calls are serialised where they change state, while the API reads of one call run
concurrently. Two driver instances run on one node during a rolling update, so "serialised" is
across processes: every read-modify-write of the checkpoint and of the specs it names happens
under ``checkpoint.lock`` (``file_lock``), with the checkpoint read again under the lock;
nothing another instance can change is trusted from memory. A claim unprepared while its
prepare was reading it from the API server is not recorded by that prepare, whichever instance
the unprepare reached: the prepare notes the checkpoint's generation before it reads, every
unprepare leaves a tombstone in the checkpoint with the generation of its write, and a
tombstone newer than what the prepare saw refuses it (``checkpoint_format``): the kubelet's
latest word wins, no record or spec is left behind, and the pruned tombstones stay bounded.

A share of a shared device (an allocation result consuming ``queues``, or with a share ID) is
checked against what this node publishes (``shares``: by device name, the queue capacity of
each shared device, or why the device is not shared): a share on a device that is not shared
(its engine not in ``dra.sharedEngines``) or consuming more queues than the device publishes
(the claim's shares of one device together) is refused, naming the device and the limit
(``claim_checks``). Records already in the checkpoint are not checked again: their containers run.

A record is keyed by claim UID, and a UID names one claim: a prepare naming a recorded UID with
another namespace or name is refused (it never rewrites the record), and an unprepare so named
leaves the record alone. A checkpoint that cannot be read (``CheckpointUnreadable``) fails the
call in one line and changes nothing; ``problems`` says so for readiness.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra import cdi_claims
from kae_deviceplugin.dra.checkpoint import (
    Checkpoint,
    CheckpointFile,
    PreparedClaim,
    PreparedDevice,
)
from kae_deviceplugin.dra.claim_checks import named_otherwise, other_name
from kae_deviceplugin.dra.claim_specs import (
    ClaimAnswer,
    ClaimSpecs,
    ContainerPolicy,
    Reconciled,
    ShareLimits,
)
from kae_deviceplugin.dra.claims import ClaimRef, allocated_devices
from kae_deviceplugin.dra.file_lock import FileLock
from kae_deviceplugin.dra.prepare_times import PrepareTimes
from kae_deviceplugin.errors import (
    TEXT_LIMIT,
    CheckpointError,
    ClaimRefused,
    RequestBudgetSpent,
    cause,
    clipped,
)

log = logging.getLogger(__name__)

GetClaim = Callable[[str, str], Awaitable[Mapping[str, Any]]]
CLAIM_READ_TIMEOUT = 30.0  # the kubelet gives the whole call 45 s
LOCK_TIMEOUT = 10.0  # another instance holds checkpoint.lock for milliseconds, not seconds
LOCK_NAME = "checkpoint.lock"


class ClaimPreparer:
    """Prepares and unprepares claims for one node's pool; owns the checkpoint and the specs."""

    def __init__(
        self,
        *,
        pool: str,
        inventory: Callable[[], Inventory],
        policy: Callable[[], ContainerPolicy],
        get_claim: GetClaim,
        checkpoint: CheckpointFile,
        cdi_dir: Path,
        claim_timeout: float = CLAIM_READ_TIMEOUT,
        refusal: Callable[[], str | None] = lambda: None,
        clock: Callable[[], float] = time.time,
        shares: ShareLimits = lambda: {},
    ) -> None:
        self.pool = pool
        self.get_claim = get_claim
        self.checkpoint = checkpoint
        self.cdi_dir = cdi_dir
        self.claim_timeout = claim_timeout
        self.clock = clock  # wall time, for the tombstones' age (two instances share it)
        self.specs = ClaimSpecs(inventory, policy, cdi_dir, refusal, shares)
        # What the checkpoint said when last read: for metrics and to skip API reads of claims
        # already prepared; every change reads the file again under the lock.
        self.state: Checkpoint = checkpoint.load()  # a damaged checkpoint refuses to start
        self._lock = asyncio.Lock()  # this process's calls, before they take the file lock
        self.file_lock = FileLock(checkpoint.directory / LOCK_NAME)
        self.unreadable: str | None = None  # why the checkpoint could not be read last time

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[Checkpoint]:
        """Both locks, and the checkpoint as it is on disk now."""
        async with self._lock, self.file_lock.held_for(LOCK_TIMEOUT):
            self.state = self._load()
            yield self.state

    def _load(self) -> Checkpoint:
        try:
            loaded = self.checkpoint.load()
        except CheckpointError as err:
            if self.unreadable != str(err):
                log.error("%s", err)
            self.unreadable = str(err)
            raise
        self.unreadable = None
        return loaded

    def problems(self) -> list[str]:
        """Why no claim can be prepared or unprepared now, for readiness: the checkpoint or its
        directory cannot be read, or was replaced (a symlink) since the driver started."""
        try:
            self.checkpoint.check()
            if self.unreadable is not None:
                self._load()  # a file put back: ready again without waiting for a call
        except CheckpointError as err:
            return [str(err)]
        return []

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimAnswer]:
        """An answer for every claim asked, keyed by UID; logs where the time went."""
        times = PrepareTimes()
        # The generation before the reads an unprepare may overtake; the file is parsed again
        # only when another instance wrote it since (a view older than the file could only
        # refuse too much, never too little).
        seen = self.state if self.checkpoint.unchanged() else self._load()
        asked = [c for c in claims if c.uid not in seen.claims]
        fetched = dict(
            zip(
                (c.uid for c in asked),
                await asyncio.gather(*map(self._results, asked)),
                strict=True,
            )
        )
        times.read = times.mark() - times.started
        async with self.locked() as current:
            times.lock = times.mark() - times.started - times.read
            # Under the lock, on the file: an unprepare on either instance leaves a tombstone.
            for uid in fetched:
                if current.overtaken(uid, seen.generation):  # the kubelet unprepared it meanwhile
                    fetched[uid] = ClaimRefused(
                        f"claim {clipped(uid)} was unprepared while being read"
                    )
            times.fsyncs_start()
            answers, state, written = self._write_all(claims, fetched, current, times)
            committed = times.mark()
            answers = self._commit(state, answers, written)
            times.checkpoint = times.mark() - committed
            times.fsyncs_end()
        log.info("%s", times.line(clipped(c.uid) for c in claims))
        return answers

    def _write_all(
        self,
        claims: Sequence[ClaimRef],
        fetched: Mapping[str, tuple[PreparedDevice, ...] | ClaimRefused],
        state: Checkpoint,
        times: PrepareTimes,
    ) -> tuple[dict[str, ClaimAnswer], Checkpoint, list[str]]:
        """Every claim's spec written (under the locks); the answers and the state to commit."""
        answers: dict[str, ClaimAnswer] = {}
        written: list[str] = []
        for claim in claims:
            started = times.mark()
            try:
                results = _results_now(self.state, claim, fetched)
                new = claim.uid not in self.state.claims
                answers[claim.uid] = self.specs.write(
                    claim, results, require_healthy=True, new=new
                )[0]
            except (ClaimRefused, OSError, ValueError) as err:
                answers[claim.uid] = ClaimAnswer(error=str(err))
                continue
            finally:
                times.spec += times.mark() - started
            written.append(claim.uid)
            spec = cdi_claims.spec_file(claim.uid)
            state = state.with_claim(
                PreparedClaim(claim.uid, claim.namespace, claim.name, results, spec)
            )
        return answers, state, written

    async def _results(self, claim: ClaimRef) -> tuple[PreparedDevice, ...] | ClaimRefused:
        try:
            cdi_claims.spec_file(claim.uid)  # refuse a UID unfit for a file name before asking
            async with asyncio.timeout(self.claim_timeout):
                obj = await self.get_claim(claim.namespace, claim.name)
            return allocated_devices(obj, claim, self.pool)
        except Exception as err:  # the API client's errors are many; each is this claim's
            return _refused(claim, err, self.claim_timeout)

    def _save(self, state: Checkpoint) -> Checkpoint:
        """Write ``state`` (one generation on, tombstones pruned); what was written."""
        state = state.next_write(int(self.clock()))
        self.checkpoint.save(state)
        return state

    def _commit(
        self, state: Checkpoint, answers: dict[str, ClaimAnswer], written: list[str]
    ) -> dict[str, ClaimAnswer]:
        if state == self.state:
            return answers
        try:
            state = self._save(state)
        except OSError as err:
            # Not recorded means not prepared: take back the specs this call wrote for new claims.
            for uid in written:
                if uid not in self.state.claims:
                    answers[uid] = ClaimAnswer(error=f"cannot record the claim: {err}")
                    cdi_claims.remove_spec(self.cdi_dir, uid)
            return answers
        self.state = state
        return answers

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """An error text for every claim asked ("" for success), keyed by UID. Each leaves a
        tombstone, so a prepare of it reading the API server meanwhile records nothing."""
        async with self.locked():
            others = {c.uid for c in claims if named_otherwise(self.state, c)}
            for claim in claims:
                if claim.uid in others:
                    log.warning("%s: its record stays", other_name(self.state, claim))
            mine = [c for c in claims if c.uid not in others]
            recorded = {
                c.uid: self.state.claims[c.uid].cdi_spec for c in mine if c.uid in self.state.claims
            }
            state = self.state.unprepared_now((c.uid for c in mine), int(self.clock()))
            for claim in mine:
                state = state.without_claim(claim.uid)
            try:
                if not state.same_records(self.state):
                    state = self._save(state)  # forget first: an orphan spec is removed later
            except OSError as err:
                return {c.uid: f"cannot record the unprepare: {err}" for c in claims}
            self.state = state
            return {
                c.uid: ""
                if c.uid in others
                else cdi_claims.remove_claim_specs(self.cdi_dir, c.uid, recorded.get(c.uid))
                for c in claims
            }

    async def reconcile(self) -> Reconciled:
        """At start: remove specs no claim holds, bring every checkpointed claim's spec back."""
        async with self.locked() as state:
            return self.specs.reconcile(state)


def _results_now(
    state: Checkpoint,
    claim: ClaimRef,
    fetched: Mapping[str, tuple[PreparedDevice, ...] | ClaimRefused],
) -> tuple[PreparedDevice, ...]:
    if named_otherwise(state, claim):  # a UID names one claim: never rewrite its record
        raise ClaimRefused(other_name(state, claim))
    if claim.uid in state.claims:  # prepared before: the checkpoint is the truth
        return state.claims[claim.uid].devices
    found = fetched.get(claim.uid)
    if found is None:  # it was prepared and unprepared by calls that ran meanwhile
        raise ClaimRefused(f"claim {claim} changed while it was read: ask again")
    if isinstance(found, ClaimRefused):
        raise found
    return found


def _refused(claim: ClaimRef, err: Exception, timeout: float) -> ClaimRefused:
    """Why ``claim`` could not be read, never without a cause; logged where nothing else did."""
    if isinstance(err, ClaimRefused):
        return err
    if isinstance(err, ValueError):
        return ClaimRefused(str(err))
    if isinstance(err, TimeoutError):
        message = f"cannot read claim {claim}: the API server did not answer in {timeout:g} s"
    else:
        message = f"cannot read claim {claim}: {clipped(cause(err), TEXT_LIMIT)}"
    if not isinstance(err, RequestBudgetSpent):  # that one is logged once per spell
        log.warning("%s", message)
    return ClaimRefused(message)
