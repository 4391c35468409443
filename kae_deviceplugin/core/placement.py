"""GetPreferredAllocation as a pure function, with a table of placement policies.

Devices form a hierarchy: NUMA node > PF (whose hardware queues a device uses: itself for a PF,
its parent for a VF) > device (one PCI function) > share (one of its kubelet IDs). A policy orders
the free candidates along that hierarchy:

- ``packed`` fills one group before touching the next, at every level: one NUMA node, within it
  one PF and its VFs, within that one device's shares. Groups that already hold a must_include
  device come first. Among the others it uses *best fit*: the group with the fewest free
  candidates that still holds the whole remaining request; if none does, the group with the most
  free candidates (the fewest groups get split), and so on with what is left. Fragmented groups
  are thus used up first and large free blocks stay whole for large requests.
- ``balanced`` deals candidates out round-robin over the groups at every level, so a container
  asking for several devices gets them from different NUMA nodes, PFs and devices. No device gets
  a second share while another offered device has none (two shares of one device give a
  container nothing a second device would not). Within that, the next group is the one holding
  the fewest picks so far (must_include counts as picked), then the one with the most free
  candidates (so successive pods land on the least used engines), then the lowest ID. It does not
  stick to the NUMA node of must_include: the kubelet only offers candidates the Topology Manager
  accepted (or, when those ran out, it has put all of them into must_include already), so any
  offered NUMA node is allowed and spreading is the point of the policy.

The default is ``balanced``: KAE queues and throughput belong to an engine (a PF), so spreading
gives each container, and each of a container's devices, its own engine and its full bandwidth,
and keeps load even between the engines. ``packed`` suits nodes that must keep whole PFs free for
large requests.

Rules common to every policy: the answer holds the must_include IDs that are in ``available``
first, then the policy's picks among healthy candidates, then unhealthy candidates, then IDs in
``available`` that are not candidates at all (a device that vanished since the last
ListAndWatch). The last two come in ID order. Ranking rather than dropping them keeps the answer
full: a short answer only makes the kubelet choose on its own, without any preference. The answer
never holds an ID outside ``available``, never repeats one, and holds ``min(size, |available|)``
IDs. Ties are broken by ID order, (PCI address, share) for candidates. Each call is
O(n log n) in the number of available IDs.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Literal

from kae_deviceplugin.core.views import AdvertisedDevice


@dataclass(frozen=True, slots=True)
class Candidate:
    """One kubelet device ID and where its hardware sits."""

    device_id: str
    pci_address: str
    pf_address: str
    numa_node: int | None
    share: int | None
    healthy: bool


# Ordering key of one group at one level; all levels share one type so they sort alike.
GroupKey = tuple[int, str]
# A policy: (free healthy candidates in ID order, must_include candidates, count) -> at most
# ``count`` of the free candidates, best first.
Policy = Callable[[Sequence[Candidate], Sequence[Candidate], int], list[Candidate]]


def _numa_key(candidate: Candidate) -> GroupKey:
    # Devices without a NUMA node (-1 in sysfs) sort after every real node.
    numa = candidate.numa_node
    return (numa, "") if numa is not None and numa >= 0 else (1 << 31, "")


_LEVELS: tuple[Callable[[Candidate], GroupKey], ...] = (
    _numa_key,
    lambda candidate: (0, candidate.pf_address),
    lambda candidate: (0, candidate.pci_address),
)


def _id_order(candidate: Candidate) -> tuple[str, int, str]:
    # Numeric share order: "::10" must come after "::2".
    share = -1 if candidate.share is None else candidate.share
    return (candidate.pci_address, share, candidate.device_id)


def _group(pool: Iterable[Candidate], level: int) -> dict[GroupKey, list[Candidate]]:
    """Split ``pool`` by the key of ``level``, keeping each group in the pool's order."""
    key = _LEVELS[level]
    groups: dict[GroupKey, list[Candidate]] = {}
    for candidate in pool:
        groups.setdefault(key(candidate), []).append(candidate)
    return groups


def _best_fit(sizes: Mapping[GroupKey, int], need: int) -> tuple[list[tuple[GroupKey, int]], int]:
    """Best-fit takes from ``sizes`` for ``need``: [(group, how many)], and the need left over."""
    # Largest first, lowest key among equals; the negated sizes ascend, so bisect works on them.
    order = sorted(sizes, key=lambda group: (-sizes[group], group))
    negated = [-sizes[group] for group in order]
    takes: list[tuple[GroupKey, int]] = []
    for start, group in enumerate(order):
        if need <= 0:
            break
        if sizes[group] >= need:
            # Some group left holds the rest: take the smallest such (lowest key among equals).
            end = bisect_right(negated, -need, lo=start)
            best = bisect_left(negated, negated[end - 1], lo=start)
            takes.append((order[best], need))
            return takes, 0
        takes.append((group, sizes[group]))
        need -= sizes[group]
    return takes, need


def _pack(
    pool: Sequence[Candidate], chosen: Sequence[Candidate], need: int, level: int
) -> list[Candidate]:
    if need <= 0:
        return []
    if level == len(_LEVELS):
        return list(pool[:need])
    groups = _group(pool, level)
    chosen_groups = _group(chosen, level)
    touched = {group: len(members) for group, members in groups.items() if group in chosen_groups}
    untouched = {group: len(members) for group, members in groups.items() if group not in touched}
    first, need = _best_fit(touched, need)
    second, _ = _best_fit(untouched, need)
    picked: list[Candidate] = []
    for group, count in first + second:
        picked += _pack(groups[group], chosen_groups.get(group, ()), count, level + 1)
    return picked


def _packed(pool: Sequence[Candidate], chosen: Sequence[Candidate], count: int) -> list[Candidate]:
    return _pack(pool, chosen, count, 0)


def _deal(
    pool: Sequence[Candidate], chosen: Sequence[Candidate], level: int
) -> list[tuple[int, Candidate]]:
    """All of ``pool`` dealt round-robin at ``level`` and below, each with its share round.

    A candidate's round is how many shares of its device come before it (must_include ones
    included). Every returned list ascends by round, so merging on it first never gives a device
    a second share while another device still has none.
    """
    if level == len(_LEVELS):
        return [(len(chosen) + index, candidate) for index, candidate in enumerate(pool)]
    groups = _group(pool, level)
    chosen_groups = _group(chosen, level)
    dealt = {
        group: _deal(members, chosen_groups.get(group, ()), level + 1)
        for group, members in groups.items()
    }
    # Heap entries: (next round, picked so far, -free, group key, next index). Free stays the
    # initial count so that round-robin alternates instead of draining the largest group first.
    heap = [
        (members[0][0], len(chosen_groups.get(group, ())), -len(members), group, 0)
        for group, members in dealt.items()
    ]
    heapq.heapify(heap)
    order: list[tuple[int, Candidate]] = []
    while heap:
        _, picked, free, group, index = heap[0]
        members = dealt[group]
        order.append(members[index])
        if index + 1 < len(members):
            entry = (members[index + 1][0], picked + 1, free, group, index + 1)
            heapq.heapreplace(heap, entry)
        else:
            heapq.heappop(heap)
    return order


def _balanced(
    pool: Sequence[Candidate], chosen: Sequence[Candidate], count: int
) -> list[Candidate]:
    return [candidate for _, candidate in _deal(pool, chosen, 0)[: max(count, 0)]]


PolicyName = Literal["balanced", "packed"]
POLICIES: Mapping[PolicyName, Policy] = MappingProxyType({"balanced": _balanced, "packed": _packed})
DEFAULT_POLICY: PolicyName = "balanced"


def check_policy(policy: str) -> PolicyName:
    """Return ``policy`` if it names a policy, else raise ValueError listing the valid names."""
    for name in POLICIES:
        if policy == name:
            return name
    valid = ", ".join(sorted(POLICIES))
    raise ValueError(f"unknown allocation policy {policy!r}; valid policies: {valid}")


def preferred_allocation(
    candidates: Mapping[str, Candidate],
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    policy: str = DEFAULT_POLICY,
) -> list[str]:
    """The IDs to suggest to the kubelet for one container; see the module docstring."""
    rank = POLICIES[check_policy(policy)]
    size = max(size, 0)
    offered = dict.fromkeys(available)  # ordered, deduplicated
    answer = [device_id for device_id in dict.fromkeys(must_include) if device_id in offered]
    # The kubelet never asks for fewer than it must include; if it did, "at most size" wins.
    answer = answer[:size]
    taken = set(answer)
    chosen = [candidates[device_id] for device_id in answer if device_id in candidates]
    healthy: list[Candidate] = []
    unhealthy: list[Candidate] = []
    unknown: list[str] = []
    for device_id in offered:
        if device_id in taken:
            continue
        candidate = candidates.get(device_id)
        if candidate is None:
            unknown.append(device_id)
        else:
            if candidate.device_id != device_id:  # the key is what the kubelet knows
                candidate = replace(candidate, device_id=device_id)
            (healthy if candidate.healthy else unhealthy).append(candidate)
    need = size - len(answer)
    healthy.sort(key=_id_order)
    picks = rank(healthy, chosen, need)[:need]
    unhealthy.sort(key=_id_order)
    ranked = picks + unhealthy
    answer += [candidate.device_id for candidate in ranked[:need]]
    answer += sorted(unknown)[: size - len(answer)]
    return answer


def candidates_of(advertised: Iterable[AdvertisedDevice]) -> dict[str, Candidate]:
    """Every advertised kubelet ID (one per share of a device), mapped to its candidate."""
    return {
        a.id: Candidate(
            device_id=a.id,
            pci_address=a.device.pci_address,
            pf_address=a.device.pf_address,
            numa_node=a.device.numa_node,
            share=a.share,
            healthy=a.device.healthy,
        )
        for a in advertised
    }
