"""UADK's WD_<CLASS>_CTX_NUM variables: only for classes the devices list, in UADK's format."""

from __future__ import annotations

import re
from pathlib import Path

from kae_deviceplugin.container.uadk import uadk_numa_env
from kae_deviceplugin.core.model import UacceDevice
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.sysfs_builder import DeviceSpec, build_tree
from kae_deviceplugin.testing.sysfs_trees import kunpeng_pf

# UADK's grammar (docs/wd_environment_variable): compression names four parts, the others two.
COMP_PARTS = {"sync-comp", "sync-decomp", "async-comp", "async-decomp"}
OTHER_PARTS = {"sync", "async"}
PART = re.compile(r"^([a-z-]+):([1-9][0-9]*)@([0-9]+)$")


def parts_by_node(value: str) -> dict[int, set[str]]:
    """Parse a CTX_NUM value as UADK does; a part that does not match fails the test."""
    found: dict[int, set[str]] = {}
    for part in value.split(","):
        match = PART.match(part)
        assert match is not None, f"malformed part {part!r} in {value!r}"
        found.setdefault(int(match.group(3)), set()).add(match.group(1))
    return found


def devices(tmp_path: Path, specs: list[DeviceSpec]) -> tuple[UacceDevice, ...]:
    build_tree(tmp_path, specs)
    return scan(tmp_path / "sys", tmp_path / "dev").devices


def test_compression_gets_the_four_part_format(tmp_path: Path) -> None:
    """A zip device gives WD_COMP_CTX_NUM with all four parts, and nothing else."""
    env = uadk_numa_env(devices(tmp_path, [kunpeng_pf("hisi_zip", 1, 5)]))
    assert set(env) == {"WD_COMP_CTX_NUM"}
    assert parts_by_node(env["WD_COMP_CTX_NUM"]) == {2: COMP_PARTS}


def test_ecc_only_where_the_device_lists_an_ecc_algorithm(tmp_path: Path) -> None:
    """An hpre listing rsa and dh gets RSA and DH only; one listing ecdh also gets ECC."""
    plain = kunpeng_pf("hisi_hpre", 0, 2)
    with_ecc = kunpeng_pf("hisi_hpre", 1, 3, attrs={"algorithms": "rsa\ndh\necdh\nx25519"})
    found = {d.name: d for d in devices(tmp_path, [plain, with_ecc])}
    env = uadk_numa_env([found["hisi_hpre-2"]])
    assert set(env) == {"WD_RSA_CTX_NUM", "WD_DH_CTX_NUM"}
    assert parts_by_node(env["WD_RSA_CTX_NUM"]) == {0: OTHER_PARTS}
    both = uadk_numa_env([found["hisi_hpre-2"], found["hisi_hpre-3"]])
    assert parts_by_node(both["WD_RSA_CTX_NUM"]) == {0: OTHER_PARTS, 2: OTHER_PARTS}
    assert parts_by_node(both["WD_ECC_CTX_NUM"]) == {2: OTHER_PARTS}  # only the ECC device's node


def test_sec_classes_follow_the_listed_algorithms(tmp_path: Path) -> None:
    """A SEC device listing only cipher gets WD_CIPHER_CTX_NUM, not DIGEST or AEAD."""
    sec = kunpeng_pf("hisi_sec2", 0, 0, attrs={"algorithms": "cipher"})
    env = uadk_numa_env(devices(tmp_path, [sec]))
    assert set(env) == {"WD_CIPHER_CTX_NUM"}


def test_no_variable_without_a_known_numa_node(tmp_path: Path) -> None:
    """A device whose NUMA node is unknown gives UADK no node to name: no variable at all."""
    zip_pf = kunpeng_pf("hisi_zip", 0, 4, attrs={"node_id": "-1"}, pci_attrs={"numa_node": "-1"})
    assert uadk_numa_env(devices(tmp_path, [zip_pf])) == {}


def counts_by_part(value: str) -> dict[tuple[str, int], int]:
    """(part, NUMA node) -> contexts, from a CTX_NUM value."""
    found = {}
    for part in value.split(","):
        match = PART.match(part)
        assert match is not None, f"malformed part {part!r} in {value!r}"
        found[(match.group(1), int(match.group(3)))] = int(match.group(2))
    return found


def test_a_share_of_queues_is_split_over_the_parts(tmp_path: Path) -> None:
    """8 queues of a ZIP give each of COMP's four parts 2 contexts (one queue each); 9 still
    2 (never more than held); 3, fewer than the parts, one each (a part of 0 is malformed)."""
    [zip_pf] = devices(tmp_path, [kunpeng_pf("hisi_zip", 1, 5)])
    for held, each in ((8, 2), (9, 2), (3, 1), (64, 16)):
        env = uadk_numa_env([zip_pf], {zip_pf.pci_address: held})
        assert counts_by_part(env["WD_COMP_CTX_NUM"]) == {(p, 2): each for p in COMP_PARTS}


def test_two_shared_devices_of_one_node_add_up(tmp_path: Path) -> None:
    """Two HPREs of NUMA node 0 holding 4 and 6 queues: RSA's two parts get 5 each on node 0;
    a device the share map does not name counts as holding none."""
    found = devices(tmp_path, [kunpeng_pf("hisi_hpre", 0, 2), kunpeng_pf("hisi_hpre", 0, 3, 1)])
    shares = {found[0].pci_address: 4, found[1].pci_address: 6}
    env = uadk_numa_env(found, shares)
    assert counts_by_part(env["WD_RSA_CTX_NUM"]) == {("sync", 0): 5, ("async", 0): 5}
    alone = uadk_numa_env(found, {found[0].pci_address: 4})
    assert counts_by_part(alone["WD_RSA_CTX_NUM"]) == {("sync", 0): 2, ("async", 0): 2}
