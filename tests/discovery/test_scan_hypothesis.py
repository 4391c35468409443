"""Property: no content of any attribute file makes discovery raise or lose a nameable device."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kae_deviceplugin.core.model import Health
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.sysfs_builder import find_function_dir, find_uacce_dir
from kae_deviceplugin.testing.sysfs_trees import TREES

UACCE_ATTRIBUTES = (
    "api",
    "flags",
    "available_instances",
    "algorithms",
    "isolate",
    "isolate_strategy",
    "node_id",
    "numa_distance",
    "dev_state",
    "region_mmio_size",
    "region_dus_size",
)
PCI_ATTRIBUTES = ("vendor", "device", "revision", "numa_node")

contents = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"", b"-1", b"0", b"1", b"129", b"0x19e5", b"\n", b"-", b"1e9", b"\x00"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(lambda n: str(n).encode()),
)
# None leaves the file out; "dir" turns it into a directory; "unreadable" drops read permission
shapes = st.one_of(st.none(), st.just("dir"), contents)


def _plant(path: Path, shape: object) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if shape == "dir":
        path.mkdir()
    elif isinstance(shape, bytes):
        path.write_bytes(shape)


class _Tree:
    root = Path(tempfile.mkdtemp(prefix="kaehyp", dir="/tmp"))
    TREES["kunpeng920-2p-vfs"].build(root)
    uacce = find_uacce_dir(root, "hisi_hpre-10")
    pci = find_function_dir(root, "0000:79:00.1")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    uacce=st.fixed_dictionaries({a: shapes for a in UACCE_ATTRIBUTES}),
    pci=st.fixed_dictionaries({a: shapes for a in PCI_ATTRIBUTES}),
)
def test_random_attribute_contents_never_break_discovery(
    uacce: dict[str, object], pci: dict[str, object]
) -> None:
    """Whatever the attribute files hold, scan returns every device, with sane typed values."""
    for name, shape in uacce.items():
        _plant(_Tree.uacce / name, shape)
    for name, shape in pci.items():
        _plant(_Tree.pci / name, shape)
    inventory = scan(_Tree.root / "sys", _Tree.root / "dev")
    assert len(inventory) == 18
    vf = {d.name: d for d in inventory}["hisi_hpre-10"]
    assert vf.pci_address == "0000:79:00.1"
    assert vf.numa_node is None or vf.numa_node >= 0
    assert vf.available_instances is None or isinstance(vf.available_instances, int)
    assert all(isinstance(a, str) and a for a in vf.algorithms)
    if vf.available_instances is None or vf.available_instances < 0:
        assert vf.health is Health.UNHEALTHY
    queues_ok = vf.available_instances is not None and vf.available_instances >= 0
    if uacce["isolate"] is None and uacce["dev_state"] is None and queues_ok:
        assert vf.health is Health.HEALTHY, vf.reasons


def test_unreadable_attribute_is_a_reason_not_an_exception(tmp_path: Path) -> None:
    """A permission error on available_instances (seen as root only via a directory) is a fault."""
    TREES["kunpeng920-2p"].build(tmp_path)
    target = find_uacce_dir(tmp_path, "hisi_sec2-0") / "available_instances"
    target.unlink()
    target.mkdir()  # reading a directory fails with EISDIR, like an unreadable attribute
    device = {d.name: d for d in scan(tmp_path / "sys", tmp_path / "dev")}["hisi_sec2-0"]
    assert device.health is Health.UNHEALTHY
    assert "available-instances-unreadable" in device.reasons
    assert os.path.isdir(target)
