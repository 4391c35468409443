"""Container edits (container.edits) as a value: device nodes, mounts, env and CDI names.

Devices come from discovery over a real sysfs tree built in a temporary directory; the expected
paths are spelled out from the kernel's layout (FACTS §3), not computed by the code under test.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kae_deviceplugin.container import cdi
from kae_deviceplugin.container.edits import (
    BindMount,
    ContainerEdits,
    ContainerOptions,
    DeviceNode,
    container_edits,
    device_edits,
    host_sysfs_path,
)
from kae_deviceplugin.container.sysfs_view import link_target
from kae_deviceplugin.core.model import Inventory, UacceDevice
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.sysfs_trees import TREES

# Where the kernel puts each function of the 2-socket tree with VFs (root port, then BDF).
PCI_DIRS = {
    "0000:79:00.0": "devices/pci0000:78/0000:78:00.0/0000:79:00.0",
    "0000:79:00.1": "devices/pci0000:78/0000:78:00.0/0000:79:00.1",
    "0000:b9:00.0": "devices/pci0000:b8/0000:b8:00.0/0000:b9:00.0",
    "0000:76:00.0": "devices/pci0000:74/0000:74:02.0/0000:76:00.0",
    "0000:b5:00.0": "devices/pci0000:b4/0000:b4:00.0/0000:b5:00.0",
}
CLASS_DIR = "/sys/class/uacce"
ENGINES_1_1 = "/usr/local/lib/engines-1.1"


@dataclasses.dataclass(frozen=True)
class Node:
    """A built tree and what discovery read from it."""

    root: Path
    inventory: Inventory

    def device(self, name: str) -> UacceDevice:
        return next(d for d in self.inventory if d.name == name)

    def devices(self, *names: str) -> list[UacceDevice]:
        return [self.device(name) for name in names]

    def options(self, **changes: Any) -> ContainerOptions:
        base = ContainerOptions(
            sysfs_root=self.root / "sys", state_dir=self.root / "state", dev_root=self.root / "dev"
        )
        return dataclasses.replace(base, **changes)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Node:
    """The 2-socket Kunpeng 920 with two VFs per PF, built once (tests only read it)."""
    root = tmp_path_factory.mktemp("node")
    TREES["kunpeng920-2p-vfs"].build(root)
    return Node(root, scan(root / "sys", root / "dev"))


def class_mount(node: Node) -> BindMount:
    return BindMount(CLASS_DIR, f"{node.root}/state/uacce-class", read_only=True)


def pci_mount(node: Node, address: str) -> BindMount:
    return BindMount(f"/run/kae/pci/{address}", f"{node.root}/sys/{PCI_DIRS[address]}", True)


def test_one_device_by_default(node: Node) -> None:
    """Defaults (view on, CDI off): its /dev node read-write, the node-wide class directory
    and its PCI function mounted read-only, and the KAE_HPRE_* variables; no CDI names."""
    edits = container_edits("hpre", node.devices("hisi_hpre-2"), node.options())
    assert edits == ContainerEdits(
        device_nodes=(DeviceNode("/dev/hisi_hpre-2", f"{node.root}/dev/hisi_hpre-2", "rw"),),
        mounts=(class_mount(node), pci_mount(node, "0000:79:00.0")),
        env=(("KAE_HPRE_DEVICES", "hisi_hpre-2"), ("KAE_HPRE_PCI_ADDRESSES", "0000:79:00.0")),
    )


def test_the_mounted_function_holds_what_the_view_links_to(node: Node) -> None:
    """The view's link for a device points inside the PCI mount, and the host directory
    mounted there holds the class device UADK reads (algorithms, device/numa_node)."""
    device = node.device("hisi_hpre-3")
    _, mount = container_edits("hpre", [device], node.options()).mounts
    inside = link_target(device).removeprefix(mount.container_path + "/")
    assert inside == "uacce/hisi_hpre-3"
    class_device = Path(mount.host_path) / inside
    assert (class_device / "algorithms").read_text().split() == ["rsa", "dh"]
    assert (class_device / "device" / "numa_node").read_text().strip() == "2"


def test_several_devices_keep_the_request_order(node: Node) -> None:
    """Two devices, named in reverse address order: a node and a PCI mount each, in the
    order given, one class mount, and comma-joined variables in the same order."""
    devices = node.devices("hisi_hpre-3", "hisi_hpre-2")
    edits = container_edits("hpre", devices, node.options())
    assert [n.container_path for n in edits.device_nodes] == [
        "/dev/hisi_hpre-3",
        "/dev/hisi_hpre-2",
    ]
    assert edits.mounts == (
        class_mount(node),
        pci_mount(node, "0000:b9:00.0"),
        pci_mount(node, "0000:79:00.0"),
    )
    assert dict(edits.env) == {
        "KAE_HPRE_DEVICES": "hisi_hpre-3,hisi_hpre-2",
        "KAE_HPRE_PCI_ADDRESSES": "0000:b9:00.0,0000:79:00.0",
    }


def test_a_vf_gets_its_own_function_not_its_pf(node: Node) -> None:
    """A VF's mount is the VF's PCI function directory; its node is its own /dev entry."""
    edits = container_edits("hpre", node.devices("hisi_hpre-10"), node.options())
    assert edits.mounts[1:] == (pci_mount(node, "0000:79:00.1"),)
    assert edits.device_nodes[0].host_path == f"{node.root}/dev/hisi_hpre-10"


@pytest.mark.parametrize("count", [1, 2])
def test_view_off_mounts_nothing(node: Node, count: int) -> None:
    """--container-sysfs-view off: device nodes and env only, no mount of any kind."""
    devices = node.devices("hisi_sec2-0", "hisi_sec2-1")[:count]
    edits = container_edits("sec", devices, node.options(sysfs_view=False))
    assert edits.mounts == ()
    assert len(edits.device_nodes) == count
    assert edits.cdi_devices == ()


@pytest.mark.parametrize("view", [True, False])
def test_cdi_names_the_devices_instead_of_listing_their_edits(node: Node, view: bool) -> None:
    """--cdi on: no device nodes and no per-device mounts in the answer, one CDI name per
    device in request order; the class mount stays only while the view is on; env unchanged."""
    devices = node.devices("hisi_zip-5", "hisi_zip-4")
    edits = container_edits("zip", devices, node.options(cdi=True, sysfs_view=view))
    assert edits.device_nodes == ()
    assert edits.mounts == ((class_mount(node),) if view else ())
    assert edits.cdi_devices == ("openfuyao.com/kae=0000:b5:00.0", "openfuyao.com/kae=0000:75:00.0")
    plain = container_edits("zip", devices, node.options(sysfs_view=view))
    assert edits.env == plain.env


def spec_edits(spec: dict[str, object], names: Sequence[str]) -> list[Any]:
    """The containerEdits a runtime applies for fully qualified CDI ``names``, read from the
    spec as JSON (as the runtime reads the file); a name the spec lacks fails the test."""
    loaded = json.loads(json.dumps(spec))
    entries = {f"{loaded['kind']}={d['name']}": d for d in loaded["devices"]}
    return [entries[name]["containerEdits"] for name in names]


@pytest.mark.parametrize("view", [True, False])
def test_cdi_gives_the_container_the_same_nodes_and_mounts(node: Node, view: bool) -> None:
    """The answer's CDI names, looked up in the spec built from every device's own edits,
    plus the answer's own mounts, give exactly the nodes and mounts of the non-CDI answer."""
    devices = node.devices("hisi_hpre-2", "hisi_hpre-12")
    options = node.options(sysfs_view=view)
    spec = cdi.build_spec(cdi.device_entry(d, device_edits(d, options)) for d in node.inventory)
    answer = container_edits("hpre", devices, dataclasses.replace(options, cdi=True))
    nodes, mounts = [], [(m.host_path, m.container_path, m.read_only) for m in answer.mounts]
    for edits in spec_edits(spec, answer.cdi_devices):
        nodes += [(n["hostPath"], n["path"], n["permissions"]) for n in edits["deviceNodes"]]
        mounts += [
            (m["hostPath"], m["containerPath"], "ro" in m["options"])
            for m in edits.get("mounts", [])
        ]
    plain = container_edits("hpre", devices, options)
    assert nodes == [(n.host_path, n.container_path, n.permissions) for n in plain.device_nodes]
    assert mounts == [(m.host_path, m.container_path, m.read_only) for m in plain.mounts]


def test_host_roots_rename_host_paths_only(node: Node) -> None:
    """The daemon sees the host's /sys and /dev under other prefixes: the answer names the
    host's own paths, and no container path changes."""
    moved = node.options(host_sysfs_root=Path("/sys"), host_dev_root=Path("/dev"))
    devices = node.devices("hisi_hpre-2")
    edits = container_edits("hpre", devices, moved)
    assert [(n.container_path, n.host_path) for n in edits.device_nodes] == [
        ("/dev/hisi_hpre-2", "/dev/hisi_hpre-2")
    ]
    assert edits.mounts[1] == BindMount(
        "/run/kae/pci/0000:79:00.0", f"/sys/{PCI_DIRS['0000:79:00.0']}"
    )
    assert edits.mounts[0] == class_mount(node)  # the state dir is the daemon's own path
    plain = container_edits("hpre", devices, node.options())
    assert [m.container_path for m in edits.mounts] == [m.container_path for m in plain.mounts]


def test_a_symlinked_sysfs_root_still_names_the_function(node: Node, tmp_path: Path) -> None:
    """sysfs_root given through a symlink (discovery records resolved paths): the mounted
    host path leads to the same directory; a host root of / gives /devices/..."""
    link = tmp_path / "sys-link"
    link.symlink_to(node.root / "sys")
    device = node.device("hisi_sec2-0")
    host = host_sysfs_path(device.pci_path, node.options(sysfs_root=link))
    assert host.startswith(f"{link}/")
    assert os.path.samefile(host, node.root / "sys" / PCI_DIRS["0000:76:00.0"])
    at_slash = host_sysfs_path(device.pci_path, node.options(host_sysfs_root=Path("/")))
    assert at_slash == f"/{PCI_DIRS['0000:76:00.0']}"


@pytest.mark.parametrize(
    ("engine", "names", "wd"),
    [
        (
            "hpre",
            ("hisi_hpre-2", "hisi_hpre-3"),
            {
                "WD_DH_CTX_NUM": "sync:1@0,async:1@0,sync:1@2,async:1@2",
                "WD_RSA_CTX_NUM": "sync:1@0,async:1@0,sync:1@2,async:1@2",
            },
        ),
        (
            "sec",
            ("hisi_sec2-8",),
            {
                "WD_AEAD_CTX_NUM": "sync:1@2,async:1@2",
                "WD_CIPHER_CTX_NUM": "sync:1@2,async:1@2",
                "WD_DIGEST_CTX_NUM": "sync:1@2,async:1@2",
            },
        ),
        (
            "zip",
            ("hisi_zip-4",),
            {"WD_COMP_CTX_NUM": "sync-comp:1@0,sync-decomp:1@0,async-comp:1@0,async-decomp:1@0"},
        ),
    ],
)
def test_uadk_hint_and_openssl_engines_extend_the_env(
    node: Node, engine: str, names: tuple[str, ...], wd: dict[str, str]
) -> None:
    """uadkNumaHint adds WD_<CLASS>_CTX_NUM for the classes the devices list only, in UADK's
    format per class (compression has four parts), after KAE_*; OPENSSL_ENGINES comes last."""
    devices = node.devices(*names)
    options = node.options(uadk_numa_hint=True, openssl_engines=ENGINES_1_1)
    env = container_edits(engine, devices, options).env
    prefix = f"KAE_{engine.upper()}"
    assert [key for key, _ in env[:2]] == [f"{prefix}_DEVICES", f"{prefix}_PCI_ADDRESSES"]
    assert env[2:-1] == tuple(sorted(wd.items()))
    assert env[-1] == ("OPENSSL_ENGINES", ENGINES_1_1)
    assert container_edits(engine, devices, node.options()).env == env[:2]


# ---- two resources of one container, merged as the kubelet merges them ---------------------------


def merged(answers: Sequence[ContainerEdits]) -> dict[str, str]:
    """The kubelet's merge of one container's answers: first wins per mount container path."""
    mounts: dict[str, str] = {}
    for answer in answers:
        for mount in answer.mounts:
            mounts.setdefault(mount.container_path, mount.host_path)
    return mounts


def test_openssl_conf_mounts_the_file_and_names_it(node: Node) -> None:
    """opensslConf on: the state directory's openssl/ read-only at the container path, and
    OPENSSL_CONF naming the file there; off (the default): neither."""
    device = node.devices("hisi_hpre-2")
    edits = container_edits("hpre", device, node.options(openssl_conf=True))
    conf = BindMount("/etc/kae-deviceplugin/openssl", f"{node.root}/state/openssl", True)
    assert edits.mounts[-1] == conf
    assert edits.env[-1] == ("OPENSSL_CONF", "/etc/kae-deviceplugin/openssl/openssl.cnf")
    plain = container_edits("hpre", device, node.options())
    assert conf not in plain.mounts and "OPENSSL_CONF" not in dict(plain.env)


# The HPRE and SEC devices of the tree (PFs first, then their VFs), as sysfs_fixtures lists them.
HPRE_NAMES = [f"hisi_hpre-{i}" for i in (2, 3, 10, 11, 12, 13)]
SEC_NAMES = [f"hisi_sec2-{i}" for i in (0, 1, 6, 7, 8, 9)]


def picks(names: list[str]) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(names), min_size=1, max_size=4, unique=True)


@settings(max_examples=60, deadline=None)
@given(picks(HPRE_NAMES), picks(SEC_NAMES), st.booleans(), st.booleans())
def test_answers_of_two_resources_merge_in_either_order(
    node: Node, hpre: list[str], sec: list[str], cdi_on: bool, hpre_first: bool
) -> None:
    """Any HPRE and SEC picks in one container: within an answer no container path or env
    name repeats, and the merged mounts are the union whichever answer the kubelet takes
    first (the class mount is the same in both, every other mount is one device's)."""
    options = node.options(cdi=cdi_on, uadk_numa_hint=True)
    answers = [
        container_edits("hpre", node.devices(*hpre), options),
        container_edits("sec", node.devices(*sec), options),
    ]
    for answer in answers:
        paths = [m.container_path for m in answer.mounts] + [
            n.container_path for n in answer.device_nodes
        ]
        assert len(paths) == len(set(paths))
        assert len({key for key, _ in answer.env}) == len(answer.env)
    union = {m.container_path: m.host_path for a in answers for m in a.mounts}
    order = answers if hpre_first else answers[::-1]
    assert merged(order) == union
    assert len(union) == 1 + (0 if cdi_on else len(hpre) + len(sec))
