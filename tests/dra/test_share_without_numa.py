"""A queue share on a node that does not know its NUMA nodes (a VM: ``numa_node`` -1): the
claim's CDI spec still sizes UADK's contexts to the share, on node 0, where UADK itself counts
such a device, and UADK's own parser of ``WD_<CLASS>_CTX_NUM`` accepts what the container gets.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.container.edits import ContainerOptions
from kae_deviceplugin.core.model import UacceDevice
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.dra.cdi_claims import claim_spec
from kae_deviceplugin.dra.checkpoint import PreparedDevice
from kae_deviceplugin.dra.slice_devices import device_name
from kae_deviceplugin.testing.sysfs_builder import build_tree
from kae_deviceplugin.testing.sysfs_trees import kunpeng_pf

UID = "5d0c1f4e-2b7a-4c3d-9e8f-a1b2c3d4e5f6"
SHARE = "0b8f9a52-1d3c-4e6f-8a7b-9c0d1e2f3a4b"
# sysfs of a VM: neither the uacce node_id nor the PCI function's numa_node names a node.
NO_NUMA: dict[str, Any] = {"attrs": {"node_id": "-1"}, "pci_attrs": {"numa_node": "-1"}}
COMP_MODES = ("sync-comp", "sync-decomp", "async-comp", "async-decomp")
OTHER_MODES = ("sync", "async")
ENGINES = ("hisi_zip", "hisi_hpre")


def _is_number(text: str) -> bool:
    """UADK's is_number (wd_util.c): ASCII digits, no leading zero but "0" itself."""
    return text.isascii() and text.isdigit() and (text == "0" or not text.startswith("0"))


def uadk_ctx_num(value: str, modes: tuple[str, ...], nodes: set[int]) -> dict[tuple[str, int], int]:
    """``WD_<CLASS>_CTX_NUM`` read as UADK's wd_util.c reads it, or AssertionError where UADK
    fails its init: sections split at ``,``, each ``<mode>:<num>@<node>``, the mode one of the
    class's, ``num`` and ``node`` numbers, the node one its devices are on (UADK's view, where
    an unknown node is 0), each mode given once."""
    found: dict[tuple[str, int], int] = {}
    for section in value.split(","):
        mode, colon, rest = section.partition(":")
        assert colon and mode in modes, f"UADK rejects the section {section!r} of {value!r}"
        num, at, node = rest.partition("@")
        assert at and _is_number(num) and _is_number(node), f"UADK rejects {section!r}"
        assert int(node) in nodes, f"no device of the container is on node {node} for UADK"
        assert (mode, int(node)) not in found, f"{mode}@{node} twice in {value!r}"
        found[(mode, int(node))] = int(num)
    return found


def vm_devices(root: Path) -> dict[str, UacceDevice]:
    """A ZIP and an HPRE whose NUMA node sysfs does not know, by pool device name."""
    build_tree(root, [kunpeng_pf(driver, 0, i, **NO_NUMA) for i, driver in enumerate(ENGINES)])
    found = {device_name(d): d for d in scan(root / "sys", root / "dev").devices}
    assert [d.numa_node for d in found.values()] == [None, None]  # the case under test
    return found


def request_env(spec: dict[str, object], request: str) -> dict[str, str]:
    """The environment the spec's entry for ``request`` gives the container."""
    devices = spec["devices"]
    assert isinstance(devices, list)
    [entry] = [d for d in devices if d["name"] == f"{UID}_{request}"]
    return dict(line.split("=", 1) for line in entry["containerEdits"]["env"])


@pytest.mark.parametrize("hint", [False, True])
def test_a_share_of_8_queues_gets_8_contexts_on_node_0_without_numa(
    tmp_path: Path, hint: bool
) -> None:
    """8 queues of a ZIP on a VM: WD_COMP_CTX_NUM gives each of the four modes 2 contexts @0,
    whatever env.uadkNumaHint says, and UADK's parser accepts it (node 0 is the one UADK puts
    the device on); KAE_ZIP_QUEUES is 8."""
    devices = vm_devices(tmp_path)
    [zip_name] = [name for name in devices if name.startswith("zip-")]
    options = ContainerOptions(
        sysfs_root=tmp_path / "sys", state_dir=tmp_path / "state", uadk_numa_hint=hint
    )
    result = PreparedDevice("zip", "node-1", zip_name, share_id=SHARE, queues=8)
    spec, _answer = claim_spec(UID, [result], devices, options)
    env = request_env(spec, "zip")
    assert env["KAE_ZIP_QUEUES"] == "8"
    contexts = uadk_ctx_num(env["WD_COMP_CTX_NUM"], COMP_MODES, nodes={0})
    assert contexts == {(mode, 0): 2 for mode in COMP_MODES}
    assert sum(contexts.values()) == 8  # one queue per context: the share, not UADK's default


def test_two_shares_of_one_claim_on_a_vm_each_size_their_own_engine(tmp_path: Path) -> None:
    """A claim with 6 queues of a ZIP and 4 of an HPRE, both without a NUMA node: COMP gets
    one context per queue it can split evenly (1 each of 4 modes), RSA 2 per mode, all @0."""
    devices = vm_devices(tmp_path)
    names = {d.engine: name for name, d in devices.items()}
    results = [
        PreparedDevice("zip", "node-1", names["zip"], share_id=SHARE, queues=6),
        PreparedDevice("rsa", "node-1", names["hpre"], share_id=SHARE, queues=4),
    ]
    options = ContainerOptions(sysfs_root=tmp_path / "sys", state_dir=tmp_path / "state")
    spec, _answer = claim_spec(UID, results, devices, options)
    comp = request_env(spec, "zip")["WD_COMP_CTX_NUM"]
    assert uadk_ctx_num(comp, COMP_MODES, {0}) == {(m, 0): 1 for m in COMP_MODES}
    rsa = request_env(spec, "rsa")["WD_RSA_CTX_NUM"]
    assert uadk_ctx_num(rsa, OTHER_MODES, {0}) == {(m, 0): 2 for m in OTHER_MODES}


def test_an_unshared_device_without_numa_still_gets_no_hint(tmp_path: Path) -> None:
    """No share, hint on, node unknown: no WD_*_CTX_NUM (UADK's default is node 0 anyway);
    the share's rule above is not a general one."""
    devices = vm_devices(tmp_path)
    [zip_name] = [name for name in devices if name.startswith("zip-")]
    options = ContainerOptions(
        sysfs_root=tmp_path / "sys", state_dir=tmp_path / "state", uadk_numa_hint=True
    )
    spec, _ = claim_spec(UID, [PreparedDevice("zip", "node-1", zip_name)], devices, options)
    assert not [k for k in request_env(spec, "zip") if k.startswith("WD_")]
    with_node = dataclasses.replace(devices[zip_name], numa_node=2)  # the same, node known
    spec, _ = claim_spec(
        UID, [PreparedDevice("zip", "node-1", zip_name)], {zip_name: with_node}, options
    )
    assert uadk_ctx_num(request_env(spec, "zip")["WD_COMP_CTX_NUM"], COMP_MODES, {2})
