"""Resource views (core.views.build_views) over inventories scanned from real sysfs layouts.

What the kubelet is told per resource: which PCI functions (the PF/VF choice), under which IDs
(shares), with which health and NUMA node; engines switched off have no view at all.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kae_deviceplugin.core.engines import ENGINES, ENGINES_BY_NAME
from kae_deviceplugin.core.model import Function, Inventory, UacceDevice
from kae_deviceplugin.core.views import (
    FUNCTIONS,
    EngineSettings,
    Functions,
    ResourceView,
    build_views,
)
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.sysfs_builder import build_tree, set_attribute
from kae_deviceplugin.testing.sysfs_trees import PROBE_ORDER, TREES, two_socket, with_vfs

FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"
HPRE, SEC, ZIP = (ENGINES_BY_NAME[name].resource for name in ("hpre", "sec", "zip"))
ALL_RESOURCES = {engine.resource for engine in ENGINES}
HPRE_PFS = ("0000:79:00.0", "0000:b9:00.0")
HPRE_VFS = ("0000:79:00.1", "0000:79:00.2", "0000:b9:00.1", "0000:b9:00.2")


@functools.cache
def fixture_inventory(tree: str) -> Inventory:
    """The inventory discovery reads from a checked-in tree (read-only, so scanned once)."""
    return scan(FIXTURES / tree / "sys", FIXTURES / tree / "dev")


def ids(view: ResourceView) -> tuple[str, ...]:
    return tuple(d.id for d in view.devices)


def test_default_settings_give_every_engine_a_view_of_its_own_devices() -> None:
    """No settings: one view per engine, each holding exactly that engine's devices under
    their PCI addresses, in inventory order, unshared."""
    inventory = fixture_inventory("kunpeng920-2p")
    views = build_views(inventory, {})
    assert set(views) == ALL_RESOURCES
    for resource, view in views.items():
        assert view.resource == resource
        assert ids(view) == tuple(d.pci_address for d in inventory.for_resource(resource))
        assert all(d.share is None and d.device.resource == resource for d in view.devices)
    assert ids(views[HPRE]) == HPRE_PFS


def test_missing_engine_settings_mean_the_defaults() -> None:
    """An engine absent from the mapping is served as EngineSettings() would serve it."""
    inventory = fixture_inventory("kunpeng920-2p-vfs")
    defaults = {engine.name: EngineSettings() for engine in ENGINES}
    assert build_views(inventory, {}) == build_views(inventory, defaults)


def test_the_kubelet_view_carries_id_health_and_numa_node() -> None:
    """kubelet_view is exactly what ListAndWatch sends: (ID, health string, NUMA node)."""
    views = build_views(fixture_inventory("kunpeng920-2p"), {})
    assert views[HPRE].kubelet_view == (
        ("0000:79:00.0", "Healthy", 0),
        ("0000:b9:00.0", "Healthy", 2),
    )
    assert views[ZIP].kubelet_view == (
        ("0000:75:00.0", "Healthy", 0),
        ("0000:b5:00.0", "Healthy", 2),
    )


@pytest.mark.parametrize("tree", ["kae1-4.19", "kunpeng920-v3"])
def test_every_kernel_layout_of_one_node_looks_the_same_to_the_kubelet(tree: str) -> None:
    """KAE 1.x (attrs/ subdirectory) and the V3 layout of the same 2-socket machine give the
    kubelet the same views, NUMA nodes included, as the openEuler KAE 2.0 layout."""

    def kubelet_views(name: str) -> dict[str, object]:
        return {r: v.kubelet_view for r, v in build_views(fixture_inventory(name), {}).items()}

    assert kubelet_views(tree) == kubelet_views("kunpeng920-2p")


def test_disabled_engines_have_no_view() -> None:
    """enabled=False removes the engine's resource entirely (not an empty view); all off: {}."""
    inventory = fixture_inventory("kunpeng920-2p")
    views = build_views(inventory, {"sec": EngineSettings(enabled=False)})
    assert set(views) == {HPRE, ZIP}
    off = {engine.name: EngineSettings(enabled=False) for engine in ENGINES}
    assert build_views(inventory, off) == {}


def test_an_empty_node_still_gets_an_empty_view_per_enabled_engine() -> None:
    """No uacce class at all: every enabled engine has a view with no devices, so its server
    can register and report zero devices until some appear."""
    inventory = fixture_inventory("empty-node")
    assert len(inventory) == 0
    views = build_views(inventory, {"zip": EngineSettings(enabled=False)})
    assert set(views) == {HPRE, SEC}
    assert all(view.devices == () and view.kubelet_view == () for view in views.values())
    assert build_views(Inventory(), {}) == {r: ResourceView(r) for r in ALL_RESOURCES}


@pytest.mark.parametrize(
    ("functions", "expected"),
    [
        ("all", HPRE_PFS[:1] + HPRE_VFS[:2] + HPRE_PFS[1:] + HPRE_VFS[2:]),
        ("pf", HPRE_PFS),
        ("vf", HPRE_VFS),
        ("prefer-vf", HPRE_VFS),
    ],
)
def test_the_functions_choice_on_a_node_with_vfs(
    functions: Functions, expected: tuple[str, ...]
) -> None:
    """Two PFs with two VFs each: all serves six (inventory order), pf the PFs, vf and
    prefer-vf the four VFs; the other engines keep their defaults."""
    views = build_views(
        fixture_inventory("kunpeng920-2p-vfs"), {"hpre": EngineSettings(functions=functions)}
    )
    assert ids(views[HPRE]) == expected
    assert len(views[SEC].devices) == len(views[ZIP].devices) == 6


def test_prefer_vf_is_decided_per_engine_across_the_node(tmp_path: Path) -> None:
    """VFs on one HPRE PF only: prefer-vf serves just those VFs, dropping both HPRE PFs (as
    documented: only VFs when the engine has any VF on the node), while SEC and ZIP, with no
    VFs, are served their PFs; vf, unlike prefer-vf, leaves an engine without VFs empty."""
    vfs = [2 if entry == ("hisi_hpre", 0) else 0 for entry in PROBE_ORDER]
    build_tree(tmp_path, with_vfs(two_socket(), vfs))
    inventory = scan(tmp_path / "sys", tmp_path / "dev")
    choices = {engine.name: EngineSettings(functions="prefer-vf") for engine in ENGINES}
    views = build_views(inventory, choices)
    assert ids(views[HPRE]) == HPRE_VFS[:2]
    assert ids(views[SEC]) == ("0000:76:00.0", "0000:b6:00.0")
    assert all(d.device.function is Function.PF for d in views[ZIP].devices)
    # vf is literal: an engine without VFs then serves nothing, where prefer-vf falls back.
    assert build_views(inventory, {"sec": EngineSettings(functions="vf")})[SEC].devices == ()


def test_unhealthy_devices_stay_advertised_as_unhealthy() -> None:
    """The faults tree: every device discovery could name is in its view (capacity counts it),
    with the kubelet's health string; a device with NUMA node -1 carries no node."""
    views = build_views(fixture_inventory("faults"), {})
    assert views[HPRE].kubelet_view == (
        ("0000:79:00.0", "Unhealthy", 0),  # engine stopped
        ("0000:b9:00.0", "Unhealthy", 2),  # driver unbound
    )
    assert views[SEC].kubelet_view == (
        ("0000:76:00.0", "Unhealthy", 0),  # isolated
        ("0000:b6:00.0", "Unhealthy", 2),  # available_instances unreadable
        ("0000:b6:00.1", "Unhealthy", 2),  # broken device link
    )
    assert views[ZIP].kubelet_view == (
        ("0000:75:00.0", "Unhealthy", 0),  # no /dev node
        ("0000:b5:00.0", "Healthy", None),  # node_id -1: topology left empty
    )


def test_shares_advertise_each_device_n_times_with_its_health() -> None:
    """shares=3: every SEC device three times as '<address>::k', k = 0, 1, 2, each share
    carrying its device's health and NUMA node; by_id finds every share."""
    views = build_views(fixture_inventory("faults"), {"sec": EngineSettings(shares=3)})
    sec = views[SEC]
    assert len(sec.devices) == 9
    for advertised in sec.devices:
        address = advertised.device.pci_address
        assert advertised.id == f"{address}::{advertised.share}"
        assert advertised.health is advertised.device.health
        assert advertised.numa_node == advertised.device.numa_node
        assert sec.by_id[advertised.id] is advertised
    assert [d.share for d in sec.devices[:3]] == [0, 1, 2]
    assert ids(views[HPRE]) == HPRE_PFS  # shares are per engine


def test_only_what_the_kubelet_sees_changes_the_kubelet_view(tmp_path: Path) -> None:
    """A new queue count makes a different view (Allocate reads it) with the same kubelet
    view (no ListAndWatch message); isolating a device changes the kubelet view."""
    TREES["kunpeng920-2p"].build(tmp_path)

    def hpre_view() -> ResourceView:
        return build_views(scan(tmp_path / "sys", tmp_path / "dev"), {})[HPRE]

    before = hpre_view()
    set_attribute(tmp_path, "hisi_hpre-2", "available_instances", "17")
    queues_changed = hpre_view()
    assert queues_changed != before
    assert queues_changed.kubelet_view == before.kubelet_view
    set_attribute(tmp_path, "hisi_hpre-3", "isolate", "1")
    isolated = hpre_view()
    assert isolated.kubelet_view == (
        ("0000:79:00.0", "Healthy", 0),
        ("0000:b9:00.0", "Unhealthy", 2),
    )


# ---- properties over sub-inventories of the scanned trees ----------------------------------------

TREE_NAMES = ("kunpeng920-2p", "kunpeng920-2p-vfs", "faults", "mainline-6.6", "kae1-4.19")


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    """Any subset of a scanned tree's devices, in discovery's order (hot-plug in any state)."""
    whole = fixture_inventory(draw(st.sampled_from(TREE_NAMES)))
    keep = draw(st.lists(st.booleans(), min_size=len(whole), max_size=len(whole)))
    return Inventory(tuple(d for d, kept in zip(whole, keep, strict=True) if kept))


engine_settings = st.builds(
    EngineSettings,
    enabled=st.booleans(),
    shares=st.integers(1, 8),
    functions=st.sampled_from(FUNCTIONS),
)
choices_strategy = st.dictionaries(st.sampled_from([e.name for e in ENGINES]), engine_settings)


def chosen(devices: tuple[UacceDevice, ...], functions: Functions) -> tuple[UacceDevice, ...]:
    """The PF/VF rule as docs/configuration.md states it."""
    pfs = tuple(d for d in devices if d.function is Function.PF)
    vfs = tuple(d for d in devices if d.function is Function.VF)
    return {"all": devices, "pf": pfs, "vf": vfs, "prefer-vf": vfs or devices}[functions]


@settings(max_examples=200, deadline=None)
@given(inventories(), choices_strategy)
def test_views_follow_the_settings_for_any_inventory(
    inventory: Inventory, choices: Mapping[str, EngineSettings]
) -> None:
    """For any inventory and settings: a view per enabled engine only; each holds the chosen
    functions of its engine in order, every one ``shares`` times under distinct IDs that
    by_id finds; the kubelet view mirrors the devices' health and NUMA node."""
    views = build_views(inventory, choices)
    enabled = {e.resource: choices.get(e.name, EngineSettings()) for e in ENGINES}
    assert set(views) == {r for r, choice in enabled.items() if choice.enabled}
    for resource, view in views.items():
        choice = enabled[resource]
        expected = chosen(inventory.for_resource(resource), choice.functions)
        assert tuple(d.device for d in view.devices) == tuple(
            device for device in expected for _ in range(choice.shares)
        )
        assert len(set(ids(view))) == len(view.devices)
        assert list(view.by_id) == list(ids(view))
        shares = [d.share for d in view.devices]
        if choice.shares == 1:
            assert ids(view) == tuple(d.pci_address for d in expected)
            assert set(shares) <= {None}
        else:
            assert shares == list(range(choice.shares)) * len(expected)
        assert view.kubelet_view == tuple(
            (d.id, d.device.health.value, d.device.numa_node) for d in view.devices
        )
        assert {health for _, health, _ in view.kubelet_view} <= {"Healthy", "Unhealthy"}


@settings(max_examples=50, deadline=None)
@given(inventories(), engine_settings)
def test_a_view_does_not_depend_on_the_other_engines_settings(
    inventory: Inventory, other: EngineSettings
) -> None:
    """HPRE's view is the same whatever SEC and ZIP are set to (settings are per engine)."""
    alone = build_views(inventory, {})[HPRE]
    mixed = build_views(inventory, {"sec": other, "zip": dataclasses.replace(other, shares=1)})
    assert mixed[HPRE] == alone
