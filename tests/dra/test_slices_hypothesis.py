"""Properties of the slice builder over inventories discovered from built sysfs trees."""

from __future__ import annotations

import atexit
import dataclasses
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kae_deviceplugin.core.health import ALL_REASONS
from kae_deviceplugin.core.model import Health, Inventory, UacceDevice
from kae_deviceplugin.dra.quantity import parse_whole_quantity
from kae_deviceplugin.dra.slice_devices import (
    TAINT_EFFECTS,
    DeviceOptions,
    TaintEffect,
    device_name,
)
from kae_deviceplugin.dra.slices import NodeRef, build_slices
from kae_deviceplugin.testing.sysfs_builder import build_tree
from kae_deviceplugin.testing.sysfs_trees import large_tree
from tests.dra.inventories import (
    C_IDENTIFIER,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    LABEL_VALUE,
    tree_inventory,
)


def _pool() -> tuple[UacceDevice, ...]:
    # Built once at import, not in a fixture: the strategies below need it when @given runs.
    root = Path(tempfile.mkdtemp(prefix="kaedra", dir="/tmp"))
    atexit.register(shutil.rmtree, root, True)
    build_tree(root, large_tree(300))
    return tree_inventory(root).devices


POOL = _pool()  # 300 devices: the six PFs of a 2-socket machine and their VFs


@dataclass(frozen=True)
class Selection:
    """Which devices of the pool a node has and what is odd about them: a short repr, where
    the inventory it stands for would make Hypothesis warn about a 44 kB one."""

    start: int
    size: int
    unhealthy: tuple[tuple[int, tuple[str, ...]], ...]
    odd_algorithms: tuple[tuple[int, tuple[str, ...]], ...]

    def inventory(self) -> Inventory:
        devices = [POOL[(self.start + k) % len(POOL)] for k in range(self.size)]
        for index, reasons in self.unhealthy:
            if index < len(devices):
                devices[index] = dataclasses.replace(
                    devices[index], health=Health.UNHEALTHY, reasons=reasons
                )
        for index, odd in self.odd_algorithms:
            if index < len(devices):
                devices[index] = dataclasses.replace(devices[index], algorithms=odd)
        return Inventory(tuple(sorted(devices, key=lambda d: (d.engine, d.pci_address))))


def _frozen(items: list[str]) -> tuple[str, ...]:
    return tuple(items)


indexes = st.integers(0, len(POOL))
reasons = st.lists(st.sampled_from(ALL_REASONS), min_size=1, max_size=3, unique=True).map(_frozen)
algorithms = st.lists(st.text(min_size=1, max_size=40), max_size=40).map(_frozen)
# A run of the pool of any length up to all of it (the slice limits need more than 128
# devices); a few draws per example rather than one per device keep generation cheap.
selections = st.builds(
    Selection,
    start=st.integers(0, len(POOL) - 1),
    size=st.integers(0, len(POOL)),
    unhealthy=st.lists(st.tuples(indexes, reasons), max_size=12).map(tuple),
    odd_algorithms=st.lists(st.tuples(indexes, algorithms), max_size=3).map(tuple),
)


def _values(attributes: dict[str, dict[str, object]]) -> Iterator[object]:
    for value in attributes.values():
        assert len(value) == 1, value  # exactly one of int, bool, string, version
        yield from value.values()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    selection=selections,
    node=st.from_regex(DNS_SUBDOMAIN, fullmatch=True).filter(lambda n: len(n) <= 253),
    effect=st.sampled_from((None, *TAINT_EFFECTS)),
    shared=st.frozensets(st.sampled_from(("hpre", "sec", "zip"))),
    every=st.integers(1, 4),  # a queue total for every n-th device, unknown for the rest
)
def test_slices_keep_every_limit(
    selection: Selection, node: str, effect: TaintEffect | None, shared: frozenset[str], every: int
) -> None:
    """Names unique and valid, every published device in exactly one slice, and no slice or
    device over an API limit, whatever the inventory, health, algorithms and options."""
    inventory = selection.inventory()
    options = DeviceOptions(taint_effect=effect, shared_engines=shared)
    queues = {d.pci_address: 1024 for d in inventory.devices[::every]}
    plan = build_slices(
        inventory, NodeRef(node, "uid"), generation=5, queues=queues, options=options
    )

    names = [s["metadata"]["name"] for s in plan.slices]
    assert len(set(names)) == len(names) >= 1
    assert all(len(n) <= 253 and DNS_SUBDOMAIN.fullmatch(n) for n in names)
    published = [d for d in inventory if d.healthy or effect is not None]
    assert sorted(plan.device_names) == sorted(device_name(d) for d in published)
    assert len(set(plan.device_names)) == len(plan.device_names)
    for obj in plan.slices:
        spec = obj["spec"]
        assert spec["pool"] == {"name": node, "generation": 5, "resourceSliceCount": len(names)}
        assert len(spec["devices"]) <= (128 if effect is None else 64)
        for device in spec["devices"]:
            assert len(device["name"]) <= 63 and DNS_LABEL.fullmatch(device["name"])
            entries = {**device["attributes"], **device.get("capacity", {})}
            assert len(entries) <= 32
            for key in entries:
                domain, _, ident = key.rpartition("/")
                assert C_IDENTIFIER.fullmatch(ident) and len(ident) <= 32, key
                assert domain in ("", "resource.kubernetes.io"), key
            for value in _values(device["attributes"]):
                assert not isinstance(value, str) or len(value) <= 64
            for taint in device.get("taints", []):
                assert len(taint["value"]) <= 63 and LABEL_VALUE.fullmatch(taint["value"])
            assert len(device.get("taints", [])) <= 16


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    selection=selections,
    effect=st.sampled_from(TAINT_EFFECTS),
    shared=st.frozensets(st.sampled_from(("hpre", "sec", "zip"))),
    total=st.integers(0, 4096),
)
def test_taints_and_sharing_say_what_the_inventory_says(
    selection: Selection, effect: TaintEffect, shared: frozenset[str], total: int
) -> None:
    """With taints on, every device is published; exactly the unhealthy ones carry the one
    unhealthy taint (their reasons, the effect asked); each slice holds the same devices as
    when all are healthy, so a health flip never moves a device to another slice; a shared
    engine's device with 2 queues or more allows multiple allocations up to its total."""
    inventory = selection.inventory()
    options = DeviceOptions(taint_effect=effect, shared_engines=shared)
    queues = {d.pci_address: total for d in inventory}
    node = NodeRef("node-a", "uid")
    plan = build_slices(inventory, node, generation=1, queues=queues, options=options)
    all_healthy = Inventory(
        tuple(dataclasses.replace(d, health=Health.HEALTHY, reasons=()) for d in inventory)
    )
    calm = build_slices(all_healthy, node, generation=1, queues=queues, options=options)
    assert [_names(s) for s in plan.slices] == [_names(s) for s in calm.slices]
    by_name = {device_name(d): d for d in inventory}
    for obj in plan.slices:
        for entry in obj["spec"]["devices"]:
            device = by_name[entry["name"]]
            if device.healthy:
                assert "taints" not in entry
            else:
                [taint] = entry["taints"]
                assert taint["key"] == "kae.openfuyao.com/unhealthy"
                assert taint["effect"] == effect
                assert taint["value"] == ".".join(device.reasons)[:63].rstrip("-_.")
            sharing = device.engine in shared and total >= 2
            assert entry.get("allowMultipleAllocations", False) is sharing
            # Queues are published only where claims consume them.
            assert ("capacity" in entry) is sharing
            if sharing:
                queue_text = entry["capacity"]["queues"]["value"]
                policy = entry["capacity"]["queues"]["requestPolicy"]
                assert policy["validRange"] == {"min": "1", "max": queue_text, "step": "1"}
                assert parse_whole_quantity(queue_text) == total


def _names(obj: dict[str, Any]) -> list[str]:
    return [d["name"] for d in obj["spec"]["devices"]]
