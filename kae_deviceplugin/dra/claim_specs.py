"""The claims' CDI specs: each written from a claim's devices as the node has them now, and all
of them brought back in line with the checkpoint at start (pure of the checkpoint's locking,
which ``prepare`` holds around every call here).

A spec is written only for a claim whose every device is on this node (and healthy, for a new
prepare: the holder of a device that turned unhealthy keeps its spec), while the runtime applies
CDI devices and the node's container view is sound; a new claim's shares are checked against
what the node publishes (``claim_checks``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kae_deviceplugin.container.edits import ContainerOptions
from kae_deviceplugin.core.model import Inventory, UacceDevice
from kae_deviceplugin.dra import cdi_claims
from kae_deviceplugin.dra.cdi_claims import ClaimDevice
from kae_deviceplugin.dra.checkpoint import Checkpoint, PreparedDevice
from kae_deviceplugin.dra.claim_checks import check_shares
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.dra.slice_devices import device_name
from kae_deviceplugin.errors import ClaimRefused

ShareLimits = Callable[[], Mapping[str, int | str]]  # see claim_checks.check_shares


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


@dataclass
class ClaimSpecs:
    """Writes and removes the claims' specs in ``cdi_dir`` for one node."""

    inventory: Callable[[], Inventory]
    policy: Callable[[], ContainerPolicy]
    cdi_dir: Path
    refusal: Callable[[], str | None] = lambda: None  # why no claim can be served now (CDI off)
    shares: ShareLimits = field(default=lambda: {})

    def write(
        self,
        claim: ClaimRef,
        results: Sequence[PreparedDevice],
        *,
        require_healthy: bool,
        new: bool = False,
    ) -> tuple[ClaimAnswer, bool]:
        """The claim's answer, its spec written first; and whether the spec file changed. A
        ``new`` claim (read from the API server, not yet recorded) has its shares checked."""
        if not results:  # nothing of ours in this claim: nothing for the runtime either
            return ClaimAnswer(), False
        if (refusal := self.refusal()) is not None:
            raise ClaimRefused(f"claim {claim}: {refusal}")
        options = self.policy().container
        if options.view_problem is not None:
            raise ClaimRefused(f"claim {claim}: {options.view_problem}")
        devices = self._devices(claim, results, require_healthy=require_healthy)
        if new:
            check_shares(claim, results, self.shares())
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

    def reconcile(self, state: Checkpoint) -> Reconciled:
        """Remove specs no recorded claim holds, write every recorded claim's spec again."""
        removed, rewritten, problems = [], [], []
        for uid in sorted(cdi_claims.spec_uids(self.cdi_dir) - set(state.claims)):
            cdi_claims.remove_spec(self.cdi_dir, uid)
            removed.append(uid)
        for uid, claim in sorted(state.claims.items()):
            ref = ClaimRef(claim.namespace, claim.name, uid)
            try:
                # Health is not asked here: the holder of an unhealthy device keeps its spec.
                if self.write(ref, claim.devices, require_healthy=False)[1]:
                    rewritten.append(uid)
            except (ClaimRefused, OSError, ValueError) as err:
                problems.append(str(err))
        return Reconciled(tuple(removed), tuple(rewritten), tuple(problems))
