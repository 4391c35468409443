"""ResourceSlices from the fixture trees: names, attributes, capacity, taints, sharing, splits."""

from __future__ import annotations

import dataclasses
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]  # ships no type information
import pytest

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.core.model import Health, Inventory
from kae_deviceplugin.dra.frontend import device_options
from kae_deviceplugin.dra.slice_devices import (
    ALGORITHM_FAMILIES,
    DeviceOptions,
    algorithm_attribute,
    pcie_root,
)
from kae_deviceplugin.dra.slices import NodeRef, build_slices, devices_per_slice, slice_name
from tests.dra.inventories import DNS_SUBDOMAIN, fixture_inventory

NODE = NodeRef("worker-1", "6f1c2d1e-0000-4000-8000-000000000001")


def _devices(inventory: Inventory, **kwargs: Any) -> dict[str, dict[str, Any]]:
    kwargs.setdefault("queues", {d.pci_address: 64 for d in inventory})
    plan = build_slices(inventory, NODE, generation=1, **kwargs)
    return {d["name"]: d for s in plan.slices for d in s["spec"]["devices"]}


def test_a_kae2_pf_is_described_exactly() -> None:
    """The HPRE PF at 0000:79:00.0 of the real 2-socket machine, attribute by attribute: only
    what selectors pick by, and no queue total on an engine that is not shared (issue 31)."""
    device = _devices(fixture_inventory("kunpeng920-2p"))["hpre-0000-79-00-0"]
    assert device == {
        "name": "hpre-0000-79-00-0",
        "attributes": {
            "engine": {"string": "hpre"},
            "function": {"string": "pf"},
            "sva": {"bool": True},
            "resource.kubernetes.io/pciBusID": {"string": "0000:79:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:78"},
            "resource.kubernetes.io/numaNode": {"int": 0},
            "alg_rsa": {"bool": True},
            "alg_dh": {"bool": True},
            "alg_ecdh": {"bool": False},
            "alg_x25519": {"bool": False},
            "alg_x448": {"bool": False},
            "alg_ecdsa": {"bool": False},
            "alg_sm2": {"bool": False},
        },
    }


@pytest.mark.parametrize("tree", ["kunpeng920-2p-vfs", "mainline-5.10", "kae1-4.19"])
def test_no_device_carries_node_wide_or_identity_facts(tree: str) -> None:
    """The uacce name, the QM api, the driver version and a VF's PF are not attributes: the
    scheduler would convert them at every selector on every node it tries (issue 31); the
    node labels and the claim's status carry them."""
    for device in _devices(fixture_inventory(tree)).values():
        assert not {"uacceName", "api", "driverVersion", "physfn"} & set(device["attributes"])
        assert "capacity" not in device


def test_the_pool_is_one_slice_owned_by_the_node() -> None:
    """Six devices make one slice: pool named after the node, count right, Node as owner."""
    plan = build_slices(fixture_inventory("kunpeng920-2p"), NODE, generation=7, queues={})
    (only,) = plan.slices
    assert only["apiVersion"] == "resource.k8s.io/v1" and only["kind"] == "ResourceSlice"
    assert only["metadata"]["name"] == "worker-1-kae.openfuyao.com-0"
    assert only["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "worker-1",
            "uid": NODE.uid,
            "controller": True,
        }
    ]
    spec = only["spec"]
    assert spec["driver"] == "kae.openfuyao.com" and spec["nodeName"] == "worker-1"
    assert spec["pool"] == {"name": "worker-1", "generation": 7, "resourceSliceCount": 1}
    assert len(spec["devices"]) == 6
    assert all("capacity" not in d for d in spec["devices"])  # queue totals unknown: left out


def test_vfs_say_so() -> None:
    """A VF is ``function: vf`` at its own PCI address; its PF is ``pf``."""
    devices = _devices(fixture_inventory("kunpeng920-2p-vfs"))
    vf = devices["sec-0000-76-00-1"]["attributes"]
    assert vf["function"] == {"string": "vf"}
    assert vf["resource.kubernetes.io/pciBusID"] == {"string": "0000:76:00.1"}
    assert devices["sec-0000-76-00-0"]["attributes"]["function"] == {"string": "pf"}


@pytest.mark.parametrize(
    "tree", ["kunpeng920-2p", "kunpeng920-v3", "kae1-4.19", "mainline-5.10", "mainline-6.6"]
)
def test_every_device_of_an_engine_has_the_whole_algorithm_family(tree: str) -> None:
    """Whatever the kernel lists, each device carries every alg_* key of its engine's family,
    so a selector on any of them is never a CEL 'no such key' error."""
    inventory = fixture_inventory(tree)
    devices = _devices(inventory)
    for device in inventory:
        attributes = devices[_name(device.engine, device.pci_address)]["attributes"]
        keys = {k for k in attributes if k.startswith("alg_")}
        assert keys == {algorithm_attribute(a) for a in ALGORITHM_FAMILIES[device.engine]}
        for algorithm in device.algorithms:
            assert attributes[algorithm_attribute(algorithm)] == {"bool": True}


def _name(engine: str, pci_address: str) -> str:
    return f"{engine}-{pci_address.replace(':', '-').replace('.', '-')}"


def test_algorithm_names_follow_the_rule() -> None:
    """Lower case, every character outside [a-z0-9_] as '_'."""
    assert algorithm_attribute("SM2") == "alg_sm2"
    assert algorithm_attribute("lz77_zstd") == "alg_lz77_zstd"
    assert algorithm_attribute("lz77-zstd") == "alg_lz77_zstd"
    assert algorithm_attribute("aes(cbc)") == "alg_aes_cbc_"


def test_algorithms_beyond_the_family_are_published_true() -> None:
    """A name the kernel lists that the table does not know still becomes a true bool."""
    inventory = fixture_inventory("kunpeng920-2p")
    odd = dataclasses.replace(inventory.devices[0], algorithms=("cipher", "SM4-XTS"))
    attributes = _devices(Inventory((odd,)))[_name(odd.engine, odd.pci_address)]["attributes"]
    assert attributes["alg_sm4_xts"] == {"bool": True}


def test_an_unknown_numa_node_is_left_out() -> None:
    """-1 NUMA gives no key at all (not -1)."""
    inventory = fixture_inventory("faults")
    devices = _devices(inventory, options=DeviceOptions(taint_effect="NoSchedule"))
    no_numa = devices["zip-0000-b5-00-0"]["attributes"]
    assert "resource.kubernetes.io/numaNode" not in no_numa
    assert "resource.kubernetes.io/numaNode" in devices["zip-0000-75-00-0"]["attributes"]


def test_unhealthy_devices_are_left_out_unless_tainted() -> None:
    """Without taints an unhealthy device is not published; with them it is, tainted with
    its reasons, and the healthy ones carry no taint."""
    inventory = fixture_inventory("faults")
    healthy = {_name(d.engine, d.pci_address) for d in inventory if d.health is Health.HEALTHY}
    assert set(_devices(inventory)) == healthy
    tainted = _devices(inventory, options=DeviceOptions(taint_effect="NoExecute"))
    assert len(tainted) == len(inventory)
    isolated = tainted["sec-0000-76-00-0"]
    assert isolated["taints"] == [
        {"key": "kae.openfuyao.com/unhealthy", "value": "isolated", "effect": "NoExecute"}
    ]
    stopped = tainted["hpre-0000-79-00-0"]["taints"][0]
    assert stopped["value"] == "engine-stopped" and stopped["effect"] == "NoExecute"
    assert all("taints" not in tainted[name] for name in healthy)


def test_shared_engines_get_consumable_queues() -> None:
    """An engine in shared_engines allows multiple allocations with a queues request policy;
    the others publish no queues at all."""
    inventory = fixture_inventory("kunpeng920-2p")
    devices = _devices(inventory, options=DeviceOptions(shared_engines=frozenset({"zip"})))
    zip_pf = devices["zip-0000-75-00-0"]
    assert zip_pf["allowMultipleAllocations"] is True
    assert zip_pf["capacity"]["queues"] == {
        "value": "64",
        "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "64", "step": "1"}},
    }
    assert "allowMultipleAllocations" not in devices["hpre-0000-79-00-0"]
    assert "capacity" not in devices["hpre-0000-79-00-0"]


@pytest.mark.parametrize("total", [None, 0, 1])
def test_a_shared_engine_device_without_queues_to_split_is_not_shared(total: int | None) -> None:
    """An unknown total, or fewer than 2 queues (the API wants min + step within the
    capacity), publishes the device unshared and notes why."""
    inventory = fixture_inventory("kunpeng920-2p")
    zip_pf = next(d for d in inventory if d.engine == "zip")
    queues = {} if total is None else {zip_pf.pci_address: total}
    options = DeviceOptions(shared_engines=frozenset({"zip"}))
    plan = build_slices(inventory, NODE, generation=1, queues=queues, options=options)
    devices = {d["name"]: d for s in plan.slices for d in s["spec"]["devices"]}
    entry = devices[f"zip-{zip_pf.pci_address.replace(':', '-').replace('.', '-')}"]
    assert "allowMultipleAllocations" not in entry
    assert "requestPolicy" not in entry.get("capacity", {}).get("queues", {})
    assert any("not shared" in note for note in plan.notes)


def test_too_many_algorithms_stop_at_32_entries() -> None:
    """A device listing 40 unknown algorithms keeps its family and fills up to 32 entries."""
    inventory = fixture_inventory("kunpeng920-2p")
    many = dataclasses.replace(
        inventory.devices[0], algorithms=tuple(f"alg{i:02d}" for i in range(40))
    )
    shared = DeviceOptions(shared_engines=frozenset({many.engine}))
    queues = {many.pci_address: 8}
    plan = build_slices(Inventory((many,)), NODE, generation=1, queues=queues, options=shared)
    device = plan.slices[0]["spec"]["devices"][0]
    assert len(device["attributes"]) + len(device["capacity"]) == 32
    family = {algorithm_attribute(a) for a in ALGORITHM_FAMILIES[many.engine]}
    assert family <= set(device["attributes"])
    assert any("left out" in n for n in plan.notes)


def test_pcie_root_is_the_root_complex_directory() -> None:
    """The pci<dom>:<bus> directory right under devices/, as the upstream helper reads it."""
    path = "/x/devices/pci0000:74/y/sys/devices/pci0000:78/0000:78:00.0/0000:79:00.0"
    assert pcie_root(path) == "pci0000:78"
    assert pcie_root("/sys/devices/platform/foo/0000:79:00.0") is None


def test_empty_inventory_publishes_one_empty_slice() -> None:
    """An empty pool (driver up, no devices) is not the same as no pool."""
    plan = build_slices(Inventory(), NODE, generation=3, queues={})
    (only,) = plan.slices
    assert only["spec"]["devices"] == []
    assert only["spec"]["pool"]["resourceSliceCount"] == 1


@pytest.mark.parametrize("length", [1, 200, 232, 233, 253])
def test_slice_names_fit_and_stay_distinct(length: int) -> None:
    """Names are DNS subdomains of at most 253 characters, distinct per node and index."""
    node = ("a" * (length - 1)) + "z"
    other = ("a" * (length - 1)) + "y"
    names = {slice_name(n, i) for n in (node, other) for i in range(3)}
    assert len(names) == 6
    for name in names:
        assert len(name) <= 253 and DNS_SUBDOMAIN.fullmatch(name), name
    if length == 1:
        assert slice_name(node, 2) == "z-kae.openfuyao.com-2"


@pytest.mark.parametrize("tree", ["kunpeng920-2p-vfs", "faults", "kae1-4.19"])
def test_slices_pass_the_api_schema(tree: str) -> None:
    """The 1.37 ResourceSlice schema, strict (no unknown field), accepts every slice."""
    inventory = fixture_inventory(tree)
    options = DeviceOptions(taint_effect="NoSchedule", shared_engines=frozenset({"zip"}))
    queues = {d.pci_address: 128 for d in inventory}
    for obj in build_slices(inventory, NODE, generation=1, queues=queues, options=options).slices:
        kubernetes_validate.validate(obj, "1.37", strict=True)


@pytest.mark.parametrize(
    ("effect", "expected"),
    [("NoSchedule", "NoSchedule"), ("NoExecute", "NoExecute"), ("None", "None"), ("omit", None)],
)
def test_the_settings_choose_the_device_options(effect: str, expected: str | None) -> None:
    """dra.unhealthyTaintEffect becomes the taint effect (omit: no taint, device left out) and
    dra.sharedEngines the shared engines, as the front end builds its slices."""
    settings = Settings(unhealthy_taint_effect=effect, shared_engines=frozenset({"zip"}))  # type: ignore[arg-type]
    options = device_options(settings)
    assert options == DeviceOptions(taint_effect=expected, shared_engines=frozenset({"zip"}))  # type: ignore[arg-type]
    assert devices_per_slice(options) == (128 if expected is None else 64)
