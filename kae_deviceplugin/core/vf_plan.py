"""What each PF's VF profile asks, and whether it can be done now: pure, from what was read.

For every engine with a profile (``engines.<name>.vfs``), each of its PFs is one
:class:`VfChange`: ``done`` (it has its count), ``ready`` (it differs and nothing holds its VFs),
``pending`` (it differs, but a pod holds a VF, or queues of a VF are open, or who holds what is
unknown), or ``refused`` (it cannot work on this node: no such engine, only VFs as in a VM, no
SR-IOV, or more VFs than the PF has). The kernel's own rule is the model (FACTS.md section 12):
VFs are only removed when none is in use, and the count changes through 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Literal

from kae_deviceplugin.core.views import VfProfile

QUEUES_PER_ENGINE = 1024  # the controller's queues, which the PF and its VFs split

State = Literal["done", "ready", "pending", "refused"]
# Why a change waits or is refused: the metric's reason label (a closed set).
Reason = Literal[
    "", "held-by-pod", "queues-open", "holders-unknown", "write-failed",
    "no-engine", "no-pf", "no-sriov", "above-total",
]  # fmt: skip
Holders = Mapping[str, tuple[str, ...]]  # PCI address -> who holds it ("pod ns/name", ...)


@dataclass(frozen=True, slots=True)
class PfSriov:
    """One PF's SR-IOV as sysfs shows it (read by ``discovery.sriov``)."""

    pci_address: str
    engine: str
    total_vfs: int | None  # sriov_totalvfs; None: no SR-IOV capability (or unreadable)
    num_vfs: int | None  # sriov_numvfs
    vfs: tuple[str, ...]  # the PCI addresses of its VFs, in virtfn order
    pf_queues: int  # the driver's pf_q_num: the VFs share the rest of the controller's queues


@dataclass(frozen=True, slots=True)
class VfChange:
    """One PF (or, refused for lack of one, one engine) and what its profile asks."""

    engine: str
    pf: str  # "" where the engine has no PF on this node
    desired: int | None  # None: refused before a count could be known
    present: int
    state: State
    reason: Reason = ""
    holders: tuple[str, ...] = ()
    why: str = ""  # one line for the log and doctor; "" when done

    @property
    def setting(self) -> str:
        return f"engines.{self.engine}.vfs"


def vf_queue_split(pf_queues: int, count: int) -> list[int]:
    """The queues each of ``count`` VFs gets (``qm_vf_q_assign``): the rest of the controller's
    queues equally, the remainder to the last."""
    if count <= 0:
        return []
    share, rest = divmod(max(QUEUES_PER_ENGINE - pf_queues, 0), count)
    return [share] * (count - 1) + [share + rest]


def plan(
    profiles: Mapping[str, VfProfile],
    pfs: Sequence[PfSriov],
    engines_present: Set[str],
    available: Mapping[str, int | None],
    holders: Holders | None,
) -> tuple[VfChange, ...]:
    """The change of every PF of every engine with a profile.

    ``available`` is each VF's ``available_instances`` (by PCI address; None: unreadable);
    ``holders`` who holds each device, or None when that could not be learned.
    """
    changes: list[VfChange] = []
    for engine, profile in sorted(profiles.items()):
        if profile is None:
            continue
        mine = [pf for pf in pfs if pf.engine == engine]
        if not mine:
            changes.append(_no_pf(engine, profile, engine in engines_present))
        for pf in mine:
            changes.append(_change(engine, profile, pf, available, holders))
    return tuple(changes)


def _no_pf(engine: str, profile: VfProfile, present: bool) -> VfChange:
    setting = f"engines.{engine}.vfs"
    if present:
        why = (
            f"{setting}: {profile} cannot be applied: this node has {engine} VFs but no {engine} "
            f"PF (a VM sees VFs only); leave {setting} unset for these nodes"
        )
        return VfChange(engine, "", None, 0, "refused", "no-pf", why=why)
    why = (
        f"{setting}: {profile} cannot be applied: this node has no {engine} engine (licence, TEE "
        f"holding the SEC, or driver not loaded: see doctor); leave {setting} unset for these nodes"
    )
    return VfChange(engine, "", None, 0, "refused", "no-engine", why=why)


def _change(
    engine: str,
    profile: VfProfile,
    pf: PfSriov,
    available: Mapping[str, int | None],
    holders: Holders | None,
) -> VfChange:
    refused = _refusal(engine, profile, pf)
    if refused is not None:
        return refused
    total = pf.total_vfs or 0
    desired = total if profile == "max" else int(profile)  # type: ignore[arg-type]
    present = len(pf.vfs)
    if desired == present == pf.num_vfs:
        return VfChange(engine, pf.pci_address, desired, present, "done")
    waits = _wait(
        VfChange(engine, pf.pci_address, desired, present, "pending"), pf, available, holders
    )
    return waits or VfChange(engine, pf.pci_address, desired, present, "ready")


def _refusal(engine: str, profile: VfProfile, pf: PfSriov) -> VfChange | None:
    setting, present = f"engines.{engine}.vfs", len(pf.vfs)
    if pf.total_vfs is None or pf.num_vfs is None:
        why = f"{setting}: PF {pf.pci_address} shows no sriov_totalvfs (no SR-IOV); leave it unset"
        return VfChange(engine, pf.pci_address, None, present, "refused", "no-sriov", why=why)
    if profile != "max" and int(profile) > pf.total_vfs:  # type: ignore[arg-type]
        why = (
            f"{setting}: {profile} is above sriov_totalvfs {pf.total_vfs} of PF {pf.pci_address};"
            f" set at most {pf.total_vfs}, or max"
        )
        desired = int(profile)  # type: ignore[arg-type]
        return VfChange(engine, pf.pci_address, desired, present, "refused", "above-total", why=why)
    return None


def _wait(
    pending: VfChange, pf: PfSriov, available: Mapping[str, int | None], holders: Holders | None
) -> VfChange | None:
    """``pending`` with its reason if the PF's VFs cannot be removed now, else None."""
    if not pf.vfs:  # nothing to remove: nobody can hold a VF that is not there
        return None
    head = f"{pending.setting}: PF {pf.pci_address} keeps {len(pf.vfs)} VFs"
    if holders is None:
        why = f"{head}: who holds them is unknown (the kubelet's pod-resources did not answer)"
        return dataclasses.replace(pending, reason="holders-unknown", why=why)
    held = tuple(sorted({h for vf in pf.vfs for h in holders.get(vf, ())}))
    if held:
        why = f"{head} until these end: {', '.join(held)}"
        return dataclasses.replace(pending, reason="held-by-pod", holders=held, why=why)
    busy = _queues_open(pf, available)
    if busy:
        why = f"{head} while queues are open on {', '.join(busy)} (a process outside any pod)"
        who = tuple(f"queues of {vf}" for vf in busy)
        return dataclasses.replace(pending, reason="queues-open", holders=who, why=why)
    return None


def _queues_open(pf: PfSriov, available: Mapping[str, int | None]) -> list[str]:
    # A VF's queues are all free when available_instances is its share of the split (or more:
    # a controller with other than 1024 queues); below it, or unreadable, someone has them open.
    split = vf_queue_split(pf.pf_queues, len(pf.vfs))
    busy = []
    for vf, share in zip(pf.vfs, split, strict=True):
        now = available.get(vf)
        if now is None or now < share:
            busy.append(vf)
    return busy
