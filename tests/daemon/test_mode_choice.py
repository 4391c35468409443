"""``mode: auto``'s rule (daemon/mode_choice.py), row by row: every reason from the facts that
give it, the order of the rows, the operator's bias and the flap damping; and the state file
that carries the last choice from one start to the next."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.container.runtime_cdi import CdiSupport, cdi_support
from kae_deviceplugin.daemon import mode_choice as mc
from kae_deviceplugin.daemon.mode_choice import DAMPING, Facts, Last, Reason, decide, from_facts
from kae_deviceplugin.daemon.mode_state import STATE_FILE, read_choice, write_choice

NOW = 1_800_000_000.0
CDI_ON = cdi_support("containerd://2.1.4")
CDI_OFF = cdi_support("containerd://1.7.35", containerd_config=b"[plugins]\n")
CDI_UNKNOWN = CdiSupport(None, "docker 27.1")
READY = Facts(True, True, "v1.37.2", CDI_ON, True)


def facts(**changed: Any) -> Facts:
    return dataclasses.replace(READY, **changed)


# One row per reason: the facts that give it, the mode, and words its detail must hold.
ROWS: list[tuple[str, Facts, Reason, str]] = [
    ("all checks pass", READY, mc.DRA_READY, "v1.37.2"),
    ("no API answer", Facts(False, api_problem="connection refused"), mc.NO_API_ANSWER,
     "connection refused"),
    ("no resource.k8s.io/v1", facts(dra_v1=False), mc.NO_DRA_API, "resource.k8s.io/v1"),
    ("kubelet version unreadable", facts(kubelet_version=""), mc.KUBELET_UNKNOWN, "kubelet"),
    ("kubelet 1.33", facts(kubelet_version="v1.33.13"), mc.KUBELET_TOO_OLD, "1.34+"),
    ("kubelet 1.29", facts(kubelet_version="v1.29.6"), mc.KUBELET_TOO_OLD, "v1.29.6"),
    ("kubelet 1.34", facts(kubelet_version="v1.34.4"), mc.KUBELET_NO_EXTENDED, "1.36+"),
    ("kubelet 1.35", facts(kubelet_version="v1.35.4"), mc.KUBELET_NO_EXTENDED, "v1.35.4"),
    ("kubelet 1.36", facts(kubelet_version="v1.36.3"), mc.DRA_READY, "v1.36.3"),
    ("kubelet 2.0", facts(kubelet_version="v2.0.0"), mc.DRA_READY, "v2.0.0"),
    ("containerd 1.7 with CDI off", facts(cdi=CDI_OFF), mc.CDI_OFF, "enable_cdi = true"),
    ("a runtime nobody can judge", facts(cdi=CDI_UNKNOWN), mc.CDI_UNKNOWN, "docker 27.1"),
    ("extendedResourceName dropped", facts(extended_resources=False, classes_detail="X lost"),
     mc.NO_EXTENDED, "X lost"),
    ("a DeviceClass missing", facts(extended_resources=None, classes_detail="Y missing"),
     mc.CLASSES_UNKNOWN, "Y missing"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "given", "reason", "said"), ROWS, ids=[r[0] for r in ROWS])
def test_each_row_of_the_rule_gives_its_mode_and_reason(
    case: str, given: Facts, reason: Reason, said: str
) -> None:
    """Facts that fail exactly one check give that check's reason and the device plugin, with
    a detail naming what was seen; facts that pass every check give DRA."""
    choice = decide(given, "dra", None, NOW)
    assert (choice.mode, choice.reason) == (reason.mode, reason), case
    assert said in choice.detail, choice.detail
    assert choice.decided_at == NOW


def test_every_reason_is_a_row_of_the_table() -> None:
    """Each reason code a node can show is tested above or below (none is dead), codes are
    unique, and only DRA_READY and KEPT give DRA."""
    codes = [r.code for r in mc.REASONS]
    assert len(set(codes)) == len(codes)
    tested = {row[2] for row in ROWS} | {mc.PREFERRED, mc.KEPT}
    assert tested == set(mc.REASONS)
    assert {r for r in mc.REASONS if r.mode == "dra"} == {mc.DRA_READY, mc.KEPT}


FAILURES: dict[str, dict[str, Any]] = {
    "api": {"api_answered": False},
    "v1": {"dra_v1": False},
    "kubelet": {"kubelet_version": "v1.31.14"},
    "cdi": {"cdi": CDI_OFF},
    "classes": {"extended_resources": False},
}
ORDER = list(FAILURES)


@pytest.mark.parametrize("count", range(2, len(FAILURES) + 1))
def test_the_first_failing_row_in_the_table_order_is_the_reason(count: int) -> None:
    """Whatever combination of checks fails, the reason is the earliest in the table's order
    (API answer, v1, kubelet, CDI, DeviceClasses): the one to fix first."""
    expected = {
        "api": mc.NO_API_ANSWER,
        "v1": mc.NO_DRA_API,
        "kubelet": mc.KUBELET_TOO_OLD,
        "cdi": mc.CDI_OFF,
        "classes": mc.NO_EXTENDED,
    }
    for combination in itertools.combinations(ORDER, count):
        changed: dict[str, Any] = {}
        for name in combination:
            changed.update(FAILURES[name])
        reason, _ = from_facts(facts(**changed))
        assert reason is expected[min(combination, key=ORDER.index)], combination


@pytest.mark.parametrize(("case", "given", "reason", "said"), ROWS, ids=[r[0] for r in ROWS])
def test_prefer_device_plugin_keeps_it_and_says_what_dra_would_do(
    case: str, given: Facts, reason: Reason, said: str
) -> None:
    """The bias autoPrefer: device-plugin gives the device plugin on every node, at once (even
    over a recent DRA choice), and its detail says whether DRA would work or why not."""
    recent = Last("dra", "dra-ready", NOW - 60)
    choice = decide(given, "device-plugin", recent, NOW)
    assert (choice.mode, choice.reason) == ("device-plugin", mc.PREFERRED)
    would = "DRA would work here" if reason is mc.DRA_READY else reason.code
    assert would in choice.detail, choice.detail


SOFT = [row for row in ROWS if not row[2].hard]
HARD = [row for row in ROWS if row[2].hard and row[2].mode == "device-plugin"]


@pytest.mark.parametrize(("case", "given", "reason", "said"), SOFT, ids=[r[0] for r in SOFT])
def test_a_soft_reason_keeps_a_recent_dra_choice(
    case: str, given: Facts, reason: Reason, said: str
) -> None:
    """Within DAMPING of a DRA choice made from full facts, a reason that only says "could not
    tell" keeps DRA, names both, and keeps the old time (restarts do not stretch the window);
    after DAMPING it moves the node to the device plugin."""
    last = Last("dra", "dra-ready", NOW - DAMPING + 60)
    kept = decide(given, "dra", last, NOW)
    assert (kept.mode, kept.reason, kept.decided_at) == ("dra", mc.KEPT, last.at)
    assert reason.code in kept.detail and "dra-ready" in kept.detail
    stale = Last("dra", "dra-ready", NOW - DAMPING - 1)
    assert decide(given, "dra", stale, NOW).reason is reason


@pytest.mark.parametrize(("case", "given", "reason", "said"), HARD, ids=[r[0] for r in HARD])
def test_a_hard_reason_moves_a_node_at_once(
    case: str, given: Facts, reason: Reason, said: str
) -> None:
    """A reason the node or cluster gives (no v1, an old kubelet, CDI off, no extended
    resources) moves even a DRA choice made a minute ago to the device plugin."""
    choice = decide(given, "dra", Last("dra", "dra-ready", NOW - 60), NOW)
    assert (choice.mode, choice.reason) == ("device-plugin", reason)


def test_moving_to_dra_is_never_damped() -> None:
    """A node the device plugin served a minute ago (CDI was off) moves to DRA as soon as every
    check passes: the operator fixed the runtime and restarted the daemon."""
    choice = decide(READY, "dra", Last("device-plugin", "cdi-off", NOW - 60), NOW)
    assert (choice.mode, choice.reason) == ("dra", mc.DRA_READY)


def test_the_state_file_carries_the_choice_to_the_next_start(tmp_path: Path) -> None:
    """What one start writes, the next reads back: mode, reason code, detail and time; a
    missing, garbled or foreign file reads as no previous choice."""
    state = tmp_path / "state"
    assert read_choice(state) is None
    choice = decide(READY, "dra", None, NOW)
    write_choice(state, choice)
    recorded = read_choice(state)
    assert recorded is not None
    assert recorded.last == Last("dra", "dra-ready", NOW)
    assert recorded.detail == choice.detail
    for garbage in (b"{", b"[]", b'{"mode": "sideways", "reason": "x", "at": 1}', b"{}"):
        (state / STATE_FILE).write_bytes(garbage)
        assert read_choice(state) is None, garbage


def test_a_state_dir_that_cannot_be_written_only_loses_the_damping(tmp_path: Path) -> None:
    """A state directory in the way (a file) is logged, not fatal: the choice still stands."""
    blocked = tmp_path / "state"
    blocked.write_text("a file, not a directory")
    write_choice(blocked, decide(READY, "dra", None, NOW))
    assert read_choice(blocked) is None
