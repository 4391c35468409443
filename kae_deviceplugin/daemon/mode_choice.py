"""``mode: auto``: which front end a node runs, decided from what its daemon read at start (pure).

DRA serves a node only where every part of the path works: the API server serves
``resource.k8s.io/v1``, the node's kubelet is recent enough, the container runtime applies CDI
devices (a runtime with CDI off starts the container without its device and says nothing), and
the DeviceClasses kept ``extendedResourceName`` (so a pod asking ``limits:
{openfuyao.com/kae.hpre: 1}``, today's pod spec, is served by DRA there instead of staying
Pending). Anywhere else the device plugin serves the node, as it always did. The rule is the
table in docs/modes.md, one row per ``Reason``.

A reason is *hard* when the node or the cluster says DRA cannot work (it changes only when
someone upgrades or reconfigures something), *soft* when the daemon could not tell (no answer
from the API server, a runtime config that says nothing). The operator's bias (``autoPrefer``)
is neither: it is obeyed at once. A soft reason never moves a node off the mode it chose from
full facts less than ``DAMPING`` ago, so an API server that is away during one restart does not
flip a DRA node to the device plugin and back (flap damping; the last choice is the small
state file of ``mode_state``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from kae_deviceplugin.container.runtime_cdi import CdiSupport

Chosen = Literal["device-plugin", "dra"]
Prefer = Literal["dra", "device-plugin"]

# The oldest kubelet whose DRA API is v1 (resource.k8s.io/v1 and the kubelet's dra v1 service).
MIN_DRA_KUBELET: Final = (1, 34)
# The oldest kubelet that serves a pod's extended resources through DRA by default (feature
# DRAExtendedResource: alpha and off in 1.34-1.35): older ones leave `limits:` pods without the
# claim the scheduler made for them.
MIN_EXTENDED_KUBELET: Final = (1, 36)
DAMPING: Final = 6 * 3600.0  # seconds a full-facts choice outweighs a soft reason
UNKNOWN_RUNTIME: Final = CdiSupport(None, "the runtime")
_KUBELET_VERSION = re.compile(r"v?(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class Reason:
    """One row of the rule: its code (the label value of ``kae_mode_info``), the mode it gives,
    and whether it is hard (the node or cluster says so) or soft (the daemon could not tell)."""

    code: str
    mode: Chosen
    hard: bool


DRA_READY = Reason("dra-ready", "dra", hard=True)
PREFERRED = Reason("prefer-device-plugin", "device-plugin", hard=True)
NO_API_ANSWER = Reason("no-api-answer", "device-plugin", hard=False)
NO_DRA_API = Reason("no-dra-v1-api", "device-plugin", hard=True)
KUBELET_UNKNOWN = Reason("kubelet-version-unknown", "device-plugin", hard=False)
KUBELET_TOO_OLD = Reason("kubelet-too-old", "device-plugin", hard=True)
KUBELET_NO_EXTENDED = Reason("kubelet-no-extended-resources", "device-plugin", hard=True)
CDI_OFF = Reason("cdi-off", "device-plugin", hard=True)
CDI_UNKNOWN = Reason("cdi-unknown", "device-plugin", hard=False)
NO_EXTENDED = Reason("no-extended-resources", "device-plugin", hard=True)
CLASSES_UNKNOWN = Reason("deviceclasses-unknown", "device-plugin", hard=False)
KEPT = Reason("kept", "dra", hard=False)  # a soft reason did not move a recent DRA choice
REASONS: Final = (
    DRA_READY,
    PREFERRED,
    NO_API_ANSWER,
    NO_DRA_API,
    KUBELET_UNKNOWN,
    KUBELET_TOO_OLD,
    KUBELET_NO_EXTENDED,
    CDI_OFF,
    CDI_UNKNOWN,
    NO_EXTENDED,
    CLASSES_UNKNOWN,
    KEPT,
)


@dataclass(frozen=True, slots=True)
class Facts:
    """What the daemon read at start. ``api_answered`` False: nothing else could be read.
    ``extended_resources``: the engines' DeviceClasses read back, True when every one kept its
    ``extendedResourceName``, False when one lost it or has none, None when one is missing."""

    api_answered: bool
    dra_v1: bool = False
    kubelet_version: str = ""  # Node status.nodeInfo.kubeletVersion, e.g. v1.36.3
    cdi: CdiSupport = UNKNOWN_RUNTIME
    extended_resources: bool | None = None
    classes_detail: str = ""  # which class, when extended_resources is not True
    api_problem: str = ""  # what the API client met, when api_answered is False


@dataclass(frozen=True, slots=True)
class Last:
    """The previous start's choice, from the state file: mode, reason code and when."""

    mode: Chosen
    reason: str
    at: float  # seconds since the epoch of the last choice made from full facts


@dataclass(frozen=True, slots=True)
class Choice:
    """The mode, its reason and one line saying why (the node's annotation, the logs)."""

    mode: Chosen
    reason: Reason
    detail: str
    decided_at: float  # when the facts behind it were read (kept from ``Last`` when KEPT)

    @property
    def text(self) -> str:
        return f"{self.mode}: {self.detail}"


def kubelet_minor(version: str) -> tuple[int, int] | None:
    """(major, minor) of a kubelet version such as ``v1.36.3``; None for an unreadable one."""
    match = _KUBELET_VERSION.match(version.strip())
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def _shown(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _kubelet(version: str) -> tuple[Reason, str] | None:
    found = kubelet_minor(version)
    if found is None:
        return KUBELET_UNKNOWN, f"the Node names no readable kubelet version ({version!r})"
    if found < MIN_DRA_KUBELET:
        return KUBELET_TOO_OLD, (
            f"kubelet {version} has no DRA v1 (needs {_shown(MIN_DRA_KUBELET)}+)"
        )
    if found < MIN_EXTENDED_KUBELET:
        return KUBELET_NO_EXTENDED, (
            f"kubelet {version} does not serve limits: pods through DRA "
            f"(DRAExtendedResource needs {_shown(MIN_EXTENDED_KUBELET)}+)"
        )
    return None


def _cdi(cdi: CdiSupport) -> tuple[Reason, str] | None:
    if cdi.applies is True:
        return None
    if cdi.applies is None:
        return CDI_UNKNOWN, f"cannot tell whether {cdi.runtime} applies CDI devices"
    return CDI_OFF, cdi.reason.partition(", or run this node")[0] or f"{cdi.runtime}: CDI off"


def _classes(facts: Facts) -> tuple[Reason, str] | None:
    if facts.extended_resources is True:
        return None
    if facts.extended_resources is None:
        return CLASSES_UNKNOWN, facts.classes_detail or "a KAE DeviceClass is missing"
    return NO_EXTENDED, facts.classes_detail or "a KAE DeviceClass has no extendedResourceName"


def from_facts(facts: Facts) -> tuple[Reason, str]:
    """The first row of the rule that holds, in the table's order, and its detail."""
    if not facts.api_answered:
        return NO_API_ANSWER, facts.api_problem or "no answer from the API server at start"
    if not facts.dra_v1:
        return NO_DRA_API, "the API server does not serve resource.k8s.io/v1"
    for check in (_kubelet(facts.kubelet_version), _cdi(facts.cdi), _classes(facts)):
        if check is not None:
            return check
    runtime = facts.cdi.runtime
    return DRA_READY, f"kubelet {facts.kubelet_version}, {runtime} applies CDI, limits: served"


def decide(facts: Facts, prefer: Prefer, last: Last | None, now: float) -> Choice:
    """The mode for this start: the facts' first failing row, else DRA. The bias ``prefer:
    device-plugin`` keeps the device plugin even where DRA would work (and says whether it
    would); otherwise a soft reason keeps a DRA choice made from full facts within
    ``DAMPING`` (its time is kept too, so restarts during an outage do not stretch it)."""
    reason, detail = from_facts(facts)
    if prefer == "device-plugin":  # the operator's word: obeyed at once, never damped
        would = "DRA would work here" if reason is DRA_READY else f"{reason.code}: {detail}"
        return Choice("device-plugin", PREFERRED, f"autoPrefer: device-plugin ({would})", now)
    if not reason.hard and last is not None and last.mode == "dra" and now - last.at < DAMPING:
        ago = (now - last.at) / 3600
        kept = f"kept from {ago:.1f} h ago ({last.reason}); now {reason.code}: {detail}"
        return Choice("dra", KEPT, kept, last.at)
    return Choice(reason.mode, reason, detail, now)
