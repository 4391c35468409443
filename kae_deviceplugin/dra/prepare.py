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
prepare was reading it from the API server is not recorded by that prepare: the kubelet's
latest word wins, and no record or spec is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kae_deviceplugin.container.edits import ContainerOptions
from kae_deviceplugin.core.model import Inventory, UacceDevice
from kae_deviceplugin.dra import cdi_claims
from kae_deviceplugin.dra.cdi_claims import ClaimDevice
from kae_deviceplugin.dra.checkpoint import (
    Checkpoint,
    CheckpointFile,
    PreparedClaim,
    PreparedDevice,
)
from kae_deviceplugin.dra.claims import ClaimRef, allocated_devices
from kae_deviceplugin.dra.file_lock import FileLock
from kae_deviceplugin.dra.prepare_times import PrepareTimes
from kae_deviceplugin.dra.slice_devices import device_name
from kae_deviceplugin.errors import TEXT_LIMIT, ClaimRefused, clipped

log = logging.getLogger(__name__)

GetClaim = Callable[[str, str], Awaitable[Mapping[str, Any]]]
CLAIM_READ_TIMEOUT = 30.0  # the kubelet gives the whole call 45 s
LOCK_TIMEOUT = 10.0  # another instance holds checkpoint.lock for milliseconds, not seconds
LOCK_NAME = "checkpoint.lock"


class ContainerPolicy(Protocol):
    """What prepare reads from the serving policy (the device plugin's ServingPolicy fits)."""

    @property
    def container(self) -> ContainerOptions: ...


@dataclass(frozen=True, slots=True)
class ClaimAnswer:
    """One claim's answer: its devices with CDI IDs, or why it could not be prepared."""

    devices: tuple[ClaimDevice, ...] = ()
    error: str = ""


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What the start-up reconcile did: orphan specs removed, specs written, what it could not."""

    removed: tuple[str, ...] = ()
    rewritten: tuple[str, ...] = ()  # missing or stale, now written
    problems: tuple[str, ...] = ()


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
    ) -> None:
        self.pool = pool
        self.inventory = inventory
        self.policy = policy
        self.get_claim = get_claim
        self.checkpoint = checkpoint
        self.cdi_dir = cdi_dir
        self.claim_timeout = claim_timeout
        self.refusal = refusal  # why no claim can be served on this node now (CDI off), if so
        # What the checkpoint said when last read: for metrics and to skip API reads of claims
        # already prepared; every change reads the file again under the lock.
        self.state: Checkpoint = checkpoint.load()  # a damaged checkpoint refuses to start
        self._lock = asyncio.Lock()  # this process's calls, before they take the file lock
        self.file_lock = FileLock(checkpoint.directory / LOCK_NAME)
        self._unprepares: Counter[str] = Counter()  # by claim UID, to see one overtake a read

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[Checkpoint]:
        """Both locks, and the checkpoint as it is on disk now."""
        async with self._lock, self.file_lock.held_for(LOCK_TIMEOUT):
            self.state = self.checkpoint.load()
            yield self.state

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimAnswer]:
        """An answer for every claim asked, keyed by UID; logs where the time went."""
        times = PrepareTimes()
        asked = [c for c in claims if c.uid not in self.state.claims]
        unprepares = {c.uid: self._unprepares[c.uid] for c in asked}
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
            # Checked under the lock: an unprepare counts itself before it waits for the lock.
            for uid, seen in unprepares.items():
                if self._unprepares[uid] != seen:  # the kubelet unprepared it meanwhile
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
                answers[claim.uid] = self._write(claim, results, require_healthy=True)[0]
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
        except ClaimRefused as err:
            return err
        except ValueError as err:
            return ClaimRefused(str(err))
        except Exception as err:  # the API client's errors are many; each is this claim's
            cause = clipped(str(err) or type(err).__name__, TEXT_LIMIT)
            log.warning("cannot read claim %s: %s", claim, cause)
            return ClaimRefused(f"cannot read claim {claim}: {cause}")

    def _write(
        self, claim: ClaimRef, results: Sequence[PreparedDevice], *, require_healthy: bool
    ) -> tuple[ClaimAnswer, bool]:
        """The claim's answer, its spec written first; and whether the spec file changed."""
        if not results:  # nothing of ours in this claim: nothing for the runtime either
            return ClaimAnswer(), False
        if (refusal := self.refusal()) is not None:
            raise ClaimRefused(f"claim {claim}: {refusal}")
        options = self.policy().container
        if options.view_problem is not None:
            raise ClaimRefused(f"claim {claim}: {options.view_problem}")
        devices = self._devices(claim, results, require_healthy=require_healthy)
        spec, answer = cdi_claims.claim_spec(claim.uid, results, devices, options)
        changed = cdi_claims.write_spec(self.cdi_dir, claim.uid, spec)
        return ClaimAnswer(devices=answer), changed

    def _devices(
        self, claim: ClaimRef, results: Sequence[PreparedDevice], *, require_healthy: bool
    ) -> dict[str, UacceDevice]:
        by_name = {device_name(d): d for d in self.inventory()}
        for result in results:
            device = by_name.get(result.device)
            if device is None:
                raise ClaimRefused(f"claim {claim}: device {result.device} is not on this node")
            if require_healthy and not device.healthy:
                reasons = ", ".join(device.reasons)
                raise ClaimRefused(
                    f"claim {claim}: device {result.device} is Unhealthy ({reasons})"
                )
        return by_name

    def _commit(
        self, state: Checkpoint, answers: dict[str, ClaimAnswer], written: list[str]
    ) -> dict[str, ClaimAnswer]:
        if state == self.state:
            return answers
        try:
            self.checkpoint.save(state)
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
        """An error text for every claim asked ("" for success), keyed by UID."""
        self._unprepares.update(c.uid for c in claims)
        async with self.locked():
            recorded = {
                c.uid: self.state.claims[c.uid].cdi_spec
                for c in claims
                if c.uid in self.state.claims
            }
            state = self.state
            for claim in claims:
                state = state.without_claim(claim.uid)
            try:
                if state != self.state:
                    self.checkpoint.save(state)  # forget first: an orphan spec is removed later
            except OSError as err:
                return {c.uid: f"cannot record the unprepare: {err}" for c in claims}
            self.state = state
            return {
                c.uid: cdi_claims.remove_claim_specs(self.cdi_dir, c.uid, recorded.get(c.uid))
                for c in claims
            }

    async def reconcile(self) -> Reconciled:
        """At start: remove specs no claim holds, bring every checkpointed claim's spec back."""
        async with self.locked():
            return self._reconcile_locked()

    def _reconcile_locked(self) -> Reconciled:
        removed, rewritten, problems = [], [], []
        for uid in sorted(cdi_claims.spec_uids(self.cdi_dir) - set(self.state.claims)):
            cdi_claims.remove_spec(self.cdi_dir, uid)
            removed.append(uid)
        for uid, claim in sorted(self.state.claims.items()):
            ref = ClaimRef(claim.namespace, claim.name, uid)
            try:
                # Health is not asked here: the holder of an unhealthy device keeps its spec.
                if self._write(ref, claim.devices, require_healthy=False)[1]:
                    rewritten.append(uid)
            except (ClaimRefused, OSError, ValueError) as err:
                problems.append(str(err))
        return Reconciled(tuple(removed), tuple(rewritten), tuple(problems))


def _results_now(
    state: Checkpoint,
    claim: ClaimRef,
    fetched: Mapping[str, tuple[PreparedDevice, ...] | ClaimRefused],
) -> tuple[PreparedDevice, ...]:
    if claim.uid in state.claims:  # prepared before: the checkpoint is the truth
        return state.claims[claim.uid].devices
    found = fetched.get(claim.uid)
    if found is None:  # it was prepared and unprepared by calls that ran meanwhile
        raise ClaimRefused(f"claim {claim} changed while it was read: ask again")
    if isinstance(found, ClaimRefused):
        raise found
    return found
