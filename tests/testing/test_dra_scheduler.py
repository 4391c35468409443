"""The shipped DRA scheduler emulator (``demo --mode dra`` allocates with it): its CEL subset
agrees with a full CEL evaluator (cel-python) on the driver's published devices, and the
allocator keeps what the real one keeps: complete pools only, no refusing taint, no device
twice, matchAttribute by backtracking, None where nothing fits; and the CDI runtime emulator
refuses a name no spec defines."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import pytest
from celpy.adapter import json_to_cel

from kae_deviceplugin.discovery.queues import QueueTotals
from kae_deviceplugin.dra.slice_devices import DeviceOptions
from kae_deviceplugin.dra.slices import NodeRef, build_slices
from kae_deviceplugin.testing.cdi_container import Unresolved, run_container
from kae_deviceplugin.testing.dra_scheduler import (
    Candidate,
    SelectorError,
    Unsupported,
    allocate,
    matches,
)
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.dra.inventories import tree_inventory

DRIVER = "kae.openfuyao.com"
NUMA = "resource.kubernetes.io/numaNode"
CLASSES = {
    f"{e}.{DRIVER}": {"selectors": [{"cel": {"expression": (
        f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].engine == "{e}"')}}]}
    for e in ("hpre", "sec", "zip")
}  # fmt: skip
EXPRESSIONS = [
    *(c["selectors"][0]["cel"]["expression"] for c in CLASSES.values()),
    f'device.attributes["{DRIVER}"].alg_rsa',
    f'device.attributes["{DRIVER}"].sva',
    f'device.attributes["{DRIVER}"].sva == false',
    f'device.attributes["{DRIVER}"].function == "vf"',
    f'device.attributes["{NUMA.partition("/")[0]}"].numaNode == 2',
    'device.driver == "other.example.com"',
]


def pool_of(tmp_path: Path, tree: str = "kunpeng920-2p") -> list[dict[str, Any]]:
    """The slices the driver builds for a fixture tree (taints on, as serve --mode dra)."""
    TREES[tree].build(tmp_path)
    inventory = tree_inventory(tmp_path)
    queues = QueueTotals(tmp_path / "sys").update(inventory)
    options = DeviceOptions(taint_effect="NoSchedule")
    plan = build_slices(inventory, NodeRef("n1", "u"), generation=1, queues=queues, options=options)
    return [copy.deepcopy(s) for s in plan.slices]


def cel_says(expression: str, device: dict[str, Any]) -> bool:
    """cel-python's verdict, on the device as the scheduler's CEL environment presents it."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in device["attributes"].items():
        domain, _, key = name.rpartition("/")
        attributes.setdefault(domain or DRIVER, {})[key] = next(iter(value.values()))
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    cel_device = json_to_cel({"driver": DRIVER, "attributes": attributes})
    return bool(program.evaluate({"device": cel_device}))


@pytest.mark.parametrize("tree", ["kunpeng920-2p-vfs", "faults"])
def test_the_cel_subset_agrees_with_cel_python(tmp_path: Path, tree: str) -> None:
    """Every expression the demo and the docs use, on every published device of two trees
    (VFs, unknown NUMA nodes among them): the same verdict as a full CEL evaluator, except
    where CEL errs on a missing key, which the emulator reports as SelectorError too."""
    checked = 0
    for body in pool_of(tmp_path, tree):
        for entry in body["spec"]["devices"]:
            device = Candidate(DRIVER, "n1", entry)
            for expression in EXPRESSIONS:
                try:
                    expected: bool | None = cel_says(expression, entry)
                except Exception:  # cel-python's error for a missing key
                    expected = None
                if expected is None:
                    with pytest.raises(SelectorError):
                        matches(expression, device)
                else:
                    assert matches(expression, device) is expected, (expression, entry["name"])
                checked += 1
    assert checked >= 7 * len(EXPRESSIONS)


def claim(constraint: bool = True, count: int = 1) -> dict[str, Any]:
    """The README's claim: an HPRE with RSA and ``count`` SECs, on one NUMA node."""
    rsa = f'device.attributes["{DRIVER}"].alg_rsa'
    requests = [
        {"name": "rsa", "exactly": {"deviceClassName": f"hpre.{DRIVER}",
                                    "selectors": [{"cel": {"expression": rsa}}]}},
        {"name": "cipher", "exactly": {"deviceClassName": f"sec.{DRIVER}", "count": count}},
    ]  # fmt: skip
    return {"requests": requests, "constraints": [{"matchAttribute": NUMA}] if constraint else []}


def devices(slices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in slices for d in s["spec"]["devices"]}


def taint(entry: dict[str, Any], effect: str = "NoSchedule") -> None:
    entry.setdefault("taints", []).append({"key": f"{DRIVER}/unhealthy", "effect": effect})


def test_the_constraint_makes_the_allocator_backtrack(tmp_path: Path) -> None:
    """With NUMA node 0's SEC tainted, the first HPRE (node 0) has no partner: the allocator
    takes node 2's HPRE and SEC; without the constraint it keeps node 0's HPRE; a taint of
    effect None refuses nothing."""
    slices = pool_of(tmp_path)
    by_name = devices(slices)
    taint(by_name["sec-0000-76-00-0"])
    found = allocate(claim(), slices, CLASSES)
    assert found == [
        {"request": "rsa", "driver": DRIVER, "pool": "n1", "device": "hpre-0000-b9-00-0"},
        {"request": "cipher", "driver": DRIVER, "pool": "n1", "device": "sec-0000-b6-00-0"},
    ]
    loose = allocate(claim(constraint=False), slices, CLASSES)
    assert loose is not None and loose[0]["device"] == "hpre-0000-79-00-0"
    by_name["sec-0000-76-00-0"]["taints"] = [{"key": "x", "effect": "None"}]
    assert [r["device"] for r in allocate(claim(), slices, CLASSES) or []] == [
        "hpre-0000-79-00-0", "sec-0000-76-00-0",
    ]  # fmt: skip


def test_nothing_fits_and_no_device_is_given_twice(tmp_path: Path) -> None:
    """Two SECs on one NUMA node do not exist: None; without the constraint, two different
    SECs; every HPRE tainted NoExecute: None."""
    slices = pool_of(tmp_path)
    assert allocate(claim(count=2), slices, CLASSES) is None
    two = allocate(claim(constraint=False, count=2), slices, CLASSES) or []
    assert len({r["device"] for r in two if r["request"] == "cipher"}) == 2
    for name, entry in devices(slices).items():
        if name.startswith("hpre-"):
            taint(entry, "NoExecute")
    assert allocate(claim(), slices, CLASSES) is None


def test_an_incomplete_pool_is_not_allocated_from(tmp_path: Path) -> None:
    """A pool whose resourceSliceCount says 2 while one slice exists gives nothing."""
    slices = pool_of(tmp_path)
    slices[0]["spec"]["pool"]["resourceSliceCount"] = 2
    assert allocate(claim(), slices, CLASSES) is None


def test_what_it_does_not_evaluate_is_refused(tmp_path: Path) -> None:
    """An `||`, a function call, a capacity request: Unsupported, never a guess; a selector on
    an attribute no device has: SelectorError, as CEL's "no such key" fails the claim."""
    slices = pool_of(tmp_path)
    device = Candidate(DRIVER, "n1", devices(slices)["hpre-0000-79-00-0"])
    for expression in ('device.driver == "a" || device.driver == "b"', "has(device.x)"):
        with pytest.raises(Unsupported):
            matches(expression, device)
    with pytest.raises(SelectorError, match="no such key"):
        matches(f'device.attributes["{DRIVER}"].alg_nope', device)
    with pytest.raises(SelectorError, match="no such overload"):
        matches(f'device.attributes["{DRIVER}"].engine == 1', device)
    shared = claim()
    shared["requests"][1]["exactly"]["capacity"] = {"requests": {"queues": "8"}}
    with pytest.raises(Unsupported):
        allocate(shared, slices, CLASSES)


def test_the_runtime_refuses_a_name_no_spec_defines(tmp_path: Path) -> None:
    """A CDI name that no spec in the directory defines fails the container's start."""
    (tmp_path / "openfuyao.com-kae_x.json").write_text(
        '{"cdiVersion": "0.6.0", "kind": "openfuyao.com/kae", "devices": [{"name": "a", '
        '"containerEdits": {"env": ["A=1"]}}]}'
    )
    assert run_container(tmp_path, ["openfuyao.com/kae=a"]).env == {"A": "1"}
    with pytest.raises(Unresolved, match=r"openfuyao\.com/kae=b"):
        run_container(tmp_path, ["openfuyao.com/kae=a", "openfuyao.com/kae=b"])
