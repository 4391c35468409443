"""Preferred allocation: the common contract of every policy, and what packed and balanced pick."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kae_deviceplugin.core.model import Function, Health, UacceDevice
from kae_deviceplugin.core.placement import (
    DEFAULT_POLICY,
    POLICIES,
    Candidate,
    candidates_of,
    check_policy,
    preferred_allocation,
)
from kae_deviceplugin.core.views import EngineSettings, build_view

POLICY_NAMES = sorted(POLICIES)


def candidates_for(devices: Sequence[UacceDevice], shares: int) -> dict[str, Candidate]:
    """Candidates as the server builds them: from the resource view of ``devices``."""
    view = build_view("openfuyao.com/kae.hpre", tuple(devices), EngineSettings(shares=shares))
    return candidates_of(view.devices)


def device(
    pci_address: str, numa_node: int | None, parent: str | None = None, healthy: bool = True
) -> UacceDevice:
    """A HPRE UACCE device with only the fields allocation looks at made meaningful."""
    return UacceDevice(
        name=f"hisi_hpre-{pci_address}",
        engine="hpre",
        resource="openfuyao.com/kae.hpre",
        pci_address=pci_address,
        function=Function.VF if parent else Function.PF,
        parent_pf=parent,
        numa_node=numa_node,
        api="hisi_qm_v2",
        flags=129,
        algorithms=("rsa", "dh"),
        available_instances=256,
        isolate=0,
        dev_state=0,
        dev_node="/dev/hisi_hpre-0",
        dev_node_exists=True,
        sysfs_path="/sys/class/uacce/hisi_hpre-0",
        pci_path=f"/sys/bus/pci/devices/{pci_address}",
        health=Health.HEALTHY if healthy else Health.UNHEALTHY,
    )


def pf_with_vfs(bus: str, numa_node: int | None, vfs: int) -> list[UacceDevice]:
    """A PF at ``0000:<bus>:00.0`` and ``vfs`` VFs after it (00.1, ..., 00.7, 01.0, ...)."""
    pf = f"0000:{bus}:00.0"
    return [device(pf, numa_node)] + [
        device(f"0000:{bus}:{i // 8:02x}.{i % 8}", numa_node, parent=pf) for i in range(1, vfs + 1)
    ]


# The two-socket layout: one PF with two VFs on NUMA node 0 and one on NUMA node 2.
A0, A1, A2 = "0000:79:00.0", "0000:79:00.1", "0000:79:00.2"
B0, B1, B2 = "0000:b9:00.0", "0000:b9:00.1", "0000:b9:00.2"
TWO_SOCKETS = pf_with_vfs("79", 0, 2) + pf_with_vfs("b9", 2, 2)


def allocate(
    devices: Sequence[UacceDevice],
    shares: int,
    size: int,
    policy: str,
    *,
    must_include: Sequence[str] = (),
    available: Sequence[str] | None = None,
) -> list[str]:
    """Preferred IDs for ``devices`` split ``shares`` ways; everything is offered by default."""
    candidates = candidates_for(devices, shares)
    offered = list(candidates) if available is None else list(available)
    return preferred_allocation(candidates, offered, must_include, size, policy)


@pytest.mark.parametrize(
    ("policy", "shares", "size", "must_include", "expected"),
    [
        # balanced: one per NUMA node, then one per device, before any second share.
        ("balanced", 1, 1, [], [A0]),
        ("balanced", 1, 2, [], [A0, B0]),
        ("balanced", 1, 4, [], [A0, B0, A1, B1]),
        ("balanced", 1, 2, [B1], [B1, A0]),
        ("balanced", 1, 3, [B1, B2], [B1, B2, A0]),
        ("balanced", 3, 2, [], [f"{A0}::0", f"{B0}::0"]),
        (
            "balanced",
            3,
            7,
            [],
            [f"{d}::0" for d in (A0, B0, A1, B1, A2, B2)] + [f"{A0}::1"],
        ),
        ("balanced", 3, 2, [f"{A1}::2"], [f"{A1}::2", f"{B0}::0"]),
        # packed: one NUMA node, one PF, one device's shares, before moving on.
        ("packed", 1, 2, [], [A0, A1]),
        ("packed", 1, 4, [], [A0, A1, A2, B0]),
        ("packed", 1, 2, [B1], [B1, B0]),
        ("packed", 1, 3, [B1, A0], [B1, A0, A1]),
        ("packed", 3, 4, [], [f"{A0}::0", f"{A0}::1", f"{A0}::2", f"{A1}::0"]),
        ("packed", 3, 3, [f"{B2}::1"], [f"{B2}::1", f"{B2}::0", f"{B2}::2"]),
        ("packed", 3, 4, [f"{B2}::1"], [f"{B2}::1", f"{B2}::0", f"{B2}::2", f"{B0}::0"]),
    ],
)
def test_policy_picks_on_two_sockets(
    policy: str, shares: int, size: int, must_include: list[str], expected: list[str]
) -> None:
    """Each policy's exact choice on a 2-socket layout, with and without shares and must_include."""
    assert allocate(TWO_SOCKETS, shares, size, policy, must_include=must_include) == expected


def test_balanced_prefers_another_device_over_a_second_share() -> None:
    """Balanced gives up PF alternation before it gives a container two shares of one device."""
    devices = [device(A0, 0), *pf_with_vfs("7a", 0, 1)]
    assert allocate(devices, 2, 3, "balanced") == ["0000:7a:00.0::0", f"{A0}::0", "0000:7a:00.1::0"]


def test_packed_fills_a_partly_used_device_and_balanced_avoids_it() -> None:
    """With two shares of A0 taken elsewhere, packed uses A0's last share; balanced an idle node."""
    taken = {f"{A0}::0", f"{A0}::1"}
    available = [i for i in candidates_for(TWO_SOCKETS, 3) if i not in taken]
    assert allocate(TWO_SOCKETS, 3, 1, "packed", available=available) == [f"{A0}::2"]
    assert allocate(TWO_SOCKETS, 3, 1, "balanced", available=available) == [f"{B0}::0"]


# NUMA node 0: PF 79 with 4 devices and PF 7a with 2; NUMA node 2: PF b9 with 8.
WIDE = pf_with_vfs("79", 0, 3) + pf_with_vfs("7a", 0, 1) + pf_with_vfs("b9", 2, 7)


@pytest.mark.parametrize(
    ("policy", "size", "expected"),
    [
        # Node 0 (6 free) is the smallest node that fits; PF 7a (2) the smallest PF that fits.
        ("packed", 2, ["7a:00.0", "7a:00.1"]),
        ("packed", 3, ["79:00.0", "79:00.1", "79:00.2"]),
        # No PF of node 0 holds 5: the largest whole, then the best fit for the rest.
        ("packed", 5, ["79:00.0", "79:00.1", "79:00.2", "79:00.3", "7a:00.0"]),
        ("packed", 7, [f"b9:00.{fn}" for fn in range(7)]),
        # Node 2 has the most free devices, so it goes first; node 0 alternates its PFs.
        ("balanced", 4, ["b9:00.0", "79:00.0", "b9:00.1", "7a:00.0"]),
    ],
)
def test_policies_choose_between_pfs_of_one_node(
    policy: str, size: int, expected: list[str]
) -> None:
    """Packed takes the best-fitting PF (largest first when none fits); balanced alternates PFs."""
    assert allocate(WIDE, 1, size, policy) == [f"0000:{e}" for e in expected]


@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("shares", [1, 3])
class TestCommonContract:
    """Rules every policy obeys, whatever it prefers."""

    def test_size_larger_than_available_returns_all(self, policy: str, shares: int) -> None:
        """Asking for more than is offered returns every offered ID once."""
        ids = list(candidates_for(TWO_SOCKETS, shares))
        answer = allocate(TWO_SOCKETS, shares, len(ids) + 5, policy)
        assert sorted(answer) == sorted(ids)

    def test_empty_available_gives_empty_answer(self, policy: str, shares: int) -> None:
        """Nothing offered, nothing suggested, even with must_include."""
        must = list(candidates_for(TWO_SOCKETS, shares))[:1]
        assert allocate(TWO_SOCKETS, shares, 2, policy, must_include=must, available=[]) == []

    def test_zero_size_gives_empty_answer(self, policy: str, shares: int) -> None:
        """A size of zero (or a nonsensical negative one) suggests nothing."""
        assert allocate(TWO_SOCKETS, shares, 0, policy) == []
        assert allocate(TWO_SOCKETS, shares, -3, policy) == []

    def test_must_include_comes_first_in_order(self, policy: str, shares: int) -> None:
        """must_include IDs lead the answer in the kubelet's order, deduplicated."""
        ids = list(candidates_for(TWO_SOCKETS, shares))
        must = [ids[-1], ids[2], ids[-1]]
        answer = allocate(TWO_SOCKETS, shares, 4, policy, must_include=must)
        assert answer[:2] == [ids[-1], ids[2]]
        assert len(answer) == len(set(answer)) == 4

    def test_must_include_outside_available_is_dropped(self, policy: str, shares: int) -> None:
        """A must_include ID the kubelet did not offer never appears."""
        ids = list(candidates_for(TWO_SOCKETS, shares))
        answer = allocate(TWO_SOCKETS, shares, 2, policy, must_include=[ids[0]], available=ids[1:])
        assert ids[0] not in answer
        assert len(answer) == 2

    def test_unhealthy_come_after_healthy(self, policy: str, shares: int) -> None:
        """Unhealthy candidates are used only when healthy ones run out, in ID order."""
        devices = [device(A0, 0, healthy=False), device(B0, 2), device(B1, 2, healthy=False)]
        ids = candidates_for(devices, shares)
        healthy = [i for i, c in ids.items() if c.healthy]
        answer = allocate(devices, shares, len(healthy) + 1, policy)
        assert sorted(answer[: len(healthy)]) == sorted(healthy)
        assert answer[-1] == sorted(set(ids) - set(healthy))[0]

    def test_unknown_ids_come_last(self, policy: str, shares: int) -> None:
        """IDs the inventory does not know rank after every candidate, in string order."""
        ids = list(candidates_for(TWO_SOCKETS, shares))
        offered = ["zz", "0000:01:00.0", *ids]
        answer = allocate(TWO_SOCKETS, shares, len(ids) + 1, policy, available=offered)
        assert sorted(answer[: len(ids)]) == sorted(ids)
        assert answer[-1] == "0000:01:00.0"
        assert "zz" not in allocate(TWO_SOCKETS, shares, len(ids), policy, available=offered)

    def test_more_must_include_than_size_is_truncated(self, policy: str, shares: int) -> None:
        """If must_include alone exceeds size, the first size of them are kept."""
        ids = list(candidates_for(TWO_SOCKETS, shares))
        assert allocate(TWO_SOCKETS, shares, 2, policy, must_include=ids[:4]) == ids[:2]


def test_unknown_policy_lists_the_valid_ones() -> None:
    """A misspelt policy fails with a ValueError naming every valid policy."""
    with pytest.raises(ValueError, match=r"'spread'.*balanced, packed"):
        check_policy("spread")
    with pytest.raises(ValueError, match="balanced, packed"):
        preferred_allocation({}, [], [], 1, "spread")


def test_default_policy_is_balanced() -> None:
    """The default spreads devices over engines and is one of the table's policies."""
    assert DEFAULT_POLICY == "balanced"
    assert check_policy(DEFAULT_POLICY) in POLICIES


def test_answer_uses_the_kubelet_ids_even_if_a_candidate_disagrees() -> None:
    """The mapping's key, not the Candidate's own field, is the ID that goes back."""
    stray = Candidate("other", A0, A0, 0, None, healthy=True)
    assert preferred_allocation({A0: stray}, [A0], [], 1) == [A0]


def test_candidates_for_shares_one_and_three() -> None:
    """Candidates carry address, PF, NUMA node, share index and health of their device."""
    devices = [device(A0, 0), device(A1, 0, parent=A0, healthy=False), device(B0, None)]
    single = candidates_for(devices, 1)
    assert single[A1] == Candidate(A1, A1, A0, 0, None, healthy=False)
    assert single[B0] == Candidate(B0, B0, B0, None, None, healthy=True)
    triple = candidates_for(devices, 3)
    assert len(triple) == 9
    assert triple[f"{A1}::2"] == Candidate(f"{A1}::2", A1, A0, 0, 2, healthy=False)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, Candidate], list[str], list[str], int, str]:
    """A random layout, a random offer from it (plus strangers), must_include and size."""
    devices: list[UacceDevice] = []
    for bus in draw(st.lists(st.sampled_from(["75", "79", "b5", "b9", "c1"]), unique=True)):
        numa = draw(st.sampled_from([0, 2, None]))
        pf = f"0000:{bus}:00.0"
        devices.append(device(pf, numa, healthy=draw(st.booleans())))
        for fn in range(1, draw(st.integers(0, 4)) + 1):
            devices.append(device(f"0000:{bus}:00.{fn}", numa, pf, draw(st.booleans())))
    candidates = candidates_for(devices, draw(st.integers(1, 4)))
    ids = [*candidates, "0000:ff:00.0", "junk"]
    shuffled = draw(st.permutations(ids))
    available = shuffled[: draw(st.integers(0, len(shuffled)))]
    available += draw(st.lists(st.sampled_from(available), max_size=2)) if available else []
    size = draw(st.integers(0, len(ids) + 2))
    must = draw(st.lists(st.sampled_from(ids), max_size=size)) if ids else []
    return candidates, available, must, size, draw(st.sampled_from(POLICY_NAMES))


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_answer_obeys_the_contract(
    scenario: tuple[dict[str, Candidate], list[str], list[str], int, str],
) -> None:
    """Subset of available, no duplicates, must_include kept, and as long as it can be."""
    candidates, available, must, size, policy = scenario
    answer = preferred_allocation(candidates, available, must, size, policy)
    assert set(answer) <= set(available)
    assert len(answer) == len(set(answer)) == min(size, len(set(available)))
    kept = [i for i in dict.fromkeys(must) if i in set(available)]
    assert answer[: len(kept)] == kept
    # After must_include: healthy candidates, then unhealthy ones, then unknown IDs.
    ranks = [2 if i not in candidates else 0 if candidates[i].healthy else 1 for i in answer]
    assert ranks[len(kept) :] == sorted(ranks[len(kept) :])


@settings(max_examples=150, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_answer_ignores_the_order_of_available(
    scenario: tuple[dict[str, Candidate], list[str], list[str], int, str], rng: random.Random
) -> None:
    """Determinism: shuffling the offered IDs does not change the suggestion."""
    candidates, available, must, size, policy = scenario
    shuffled = list(available)
    rng.shuffle(shuffled)
    first = preferred_allocation(candidates, available, must, size, policy)
    assert preferred_allocation(candidates, shuffled, must, size, policy) == first


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_balanced_uses_every_device_before_a_second_share(
    scenario: tuple[dict[str, Candidate], list[str], list[str], int, str],
) -> None:
    """Without must_include, balanced picks distinct healthy devices while any remain."""
    candidates, available, _, size, _ = scenario
    answer = preferred_allocation(candidates, available, [], size, "balanced")
    offered = {candidates[i].pci_address for i in available if i in candidates}
    healthy = {
        a for a in offered if any(c.healthy and c.pci_address == a for c in candidates.values())
    }
    picked = [
        candidates[i].pci_address for i in answer if i in candidates and candidates[i].healthy
    ]
    distinct = len(set(picked[: len(healthy)]))
    assert distinct == min(len(picked), len(healthy))


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_packed_stays_on_one_numa_node_when_one_suffices(
    scenario: tuple[dict[str, Candidate], list[str], list[str], int, str],
) -> None:
    """Without must_include, packed spans one NUMA node whenever one holds the whole request."""
    candidates, available, _, size, _ = scenario
    free = [candidates[i] for i in set(available) if i in candidates and candidates[i].healthy]
    per_node = Counter(c.numa_node for c in free)
    answer = preferred_allocation(candidates, available, [], size, "packed")
    if per_node and max(per_node.values()) >= size:
        assert len({candidates[i].numa_node for i in answer}) <= 1


def big_layout(layout: str) -> dict[str, Candidate]:
    """About 10,000 IDs: 160 VFs and PFs with 63 shares each, or 10,000 lone PFs."""
    if layout == "shares":
        buses = [("75", 0), ("79", 0), ("b5", 2), ("b9", 2)]
        devices = [d for bus, numa in buses for d in pf_with_vfs(bus, numa, 39)]
        return candidates_for(devices, 63)
    addresses = [
        f"0000:{b:02x}:{s:02x}.{f}" for b in range(40) for s in range(32) for f in range(8)
    ]
    return candidates_for([device(a, 2 * (i % 2)) for i, a in enumerate(addresses[:10_000])], 1)


@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("layout", ["shares", "flat"])
def test_ten_thousand_ids_take_well_under_a_second(policy: str, layout: str) -> None:
    """No quadratic step: 10,000 candidates (shared VFs, or 10,000 lone PFs) answer in < 1 s."""
    candidates = big_layout(layout)
    ids = sorted(candidates)
    assert len(ids) >= 10_000
    started = time.perf_counter()
    answer = preferred_allocation(candidates, ids, ids[::97], len(ids) // 2, policy)
    elapsed = time.perf_counter() - started
    assert len(answer) == len(ids) // 2
    assert elapsed < 1.0, f"{policy} took {elapsed:.2f} s for {len(ids)} IDs"
