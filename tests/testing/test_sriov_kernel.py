"""The FUSE sysfs answers ``sriov_numvfs`` writes as the kernel does (FACTS.md sections 3 and 12).

Every write here goes through the mount with a real ``write(2)``, so the errno a caller sees is
the one the file system returned through the kernel's FUSE.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kae_deviceplugin.testing.sysfs_trees import kunpeng_pf, two_socket, with_vfs
from tests.support.sriov_kernel import NEEDS_FUSE, SriovKernel

pytestmark = NEEDS_FUSE
SEC0 = "0000:76:00.0"  # hisi_sec2-0, the socket-0 SEC of a 2-socket Kunpeng 920


@pytest.fixture
def kernel(tmp_path: Path) -> SriovKernel:
    return SriovKernel(tmp_path / "backing", two_socket())


@pytest.fixture
def mnt(kernel: SriovKernel, tmp_path: Path) -> Iterator[Path]:
    with kernel.mounted(tmp_path / "mnt") as root:
        yield root


def numvfs(root: Path, pf: str = SEC0) -> Path:
    return root / "sys" / "bus" / "pci" / "devices" / pf / "sriov_numvfs"


def write(path: Path, text: str) -> int:
    """Write as ``echo`` does (one write(2)); 0 or the errno the write failed with."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    except OSError as exc:
        return exc.errno or -1
    try:
        os.write(fd, text.encode())
    except OSError as exc:
        return exc.errno or -1
    finally:
        os.close(fd)
    return 0


def test_enabling_creates_whole_vfs_inside_the_write(kernel: SriovKernel, mnt: Path) -> None:
    """0 -> 5: when the write returns, five VFs exist with functions, links, uacce and /dev."""
    assert write(numvfs(mnt), "5\n") == 0
    pf_dir = (mnt / "sys" / "bus" / "pci" / "devices" / SEC0).resolve()
    assert numvfs(mnt).read_text() == "5\n"
    names = kernel.vfs_of(SEC0)
    assert names == [f"hisi_sec2-{i}" for i in range(6, 11)]  # ids after the six PFs
    for index, name in enumerate(names):
        vf_dir = (pf_dir / f"virtfn{index}").resolve()
        assert (vf_dir / "physfn").resolve() == pf_dir
        assert (vf_dir / "device").read_text() == "0xa256\n"  # the SEC VF device id
        assert (vf_dir / "driver").resolve().name == "hisi_sec2"
        uacce = (mnt / "sys" / "class" / "uacce" / name).resolve()
        assert uacce.parent.parent == vf_dir
        assert (mnt / "dev" / name).exists()
    # The PF keeps its 256 queues; 768 split five ways, the remainder (3) to the last VF.
    queues = [
        int((mnt / "sys" / "class" / "uacce" / n / "available_instances").read_text())
        for n in names
    ]
    assert queues == [153, 153, 153, 153, 156]
    pf_queues = mnt / "sys" / "class" / "uacce" / "hisi_sec2-0" / "available_instances"
    assert pf_queues.read_text() == "256\n"


def test_queue_split_follows_pf_q_num(tmp_path: Path) -> None:
    """With the module's pf_q_num at 64 the VFs share 960: 7 VFs get 137, the last 138."""
    kernel = SriovKernel(tmp_path / "backing", two_socket())
    params = kernel.backing / "sys" / "module" / "hisi_sec2" / "parameters"
    params.mkdir(parents=True, exist_ok=True)
    (params / "pf_q_num").write_text("64\n")
    with kernel.mounted(tmp_path / "mnt") as root:
        assert write(numvfs(root), "7") == 0
    assert [kernel.queues(n) for n in kernel.vfs_of(SEC0)] == [137] * 6 + [138]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("64", errno.ERANGE),
        ("abc", errno.EINVAL),
        ("-1", errno.EINVAL),
        (" 2", errno.EINVAL),
        ("70000", errno.EINVAL),
    ],
)
def test_bad_counts_are_refused_with_the_kernels_errno(
    kernel: SriovKernel, mnt: Path, text: str, code: int
) -> None:
    """Above sriov_totalvfs (63) is ERANGE, anything kstrtou16 rejects EINVAL; nothing changes."""
    assert write(numvfs(mnt), text) == code
    assert numvfs(mnt).read_text() == "0\n"
    assert kernel.vfs_of(SEC0) == []


def test_nonzero_to_nonzero_is_ebusy_and_the_same_count_is_a_no_op(
    kernel: SriovKernel, mnt: Path
) -> None:
    """2 -> 4 is EBUSY (disable first); 2 -> 2 succeeds and leaves the same VFs."""
    assert write(numvfs(mnt), "2") == 0
    before = kernel.vfs_of(SEC0)
    assert write(numvfs(mnt), "4") == errno.EBUSY
    assert write(numvfs(mnt), "2") == 0
    assert kernel.vfs_of(SEC0) == before
    assert write(numvfs(mnt), "0x0") == 0  # base prefixes as kstrtou16 reads them
    assert write(numvfs(mnt), "4") == 0
    assert len(kernel.vfs_of(SEC0)) == 4


def test_disable_is_refused_while_a_vf_is_in_use_and_freezes_the_idle_ones_before_it(
    tmp_path: Path,
) -> None:
    """A queue open on VF 2 of 3: writing 0 is EBUSY, VFs 0 and 1 are left frozen (0 queues).

    Once the queue is closed the disable succeeds and every VF, link and node is gone.
    """
    pf = kunpeng_pf("hisi_sec2", 0, 0)
    kernel = SriovKernel(tmp_path / "backing", with_vfs([pf], [3]))
    with kernel.mounted(tmp_path / "mnt") as root:
        names = kernel.vfs_of(SEC0)
        assert [kernel.queues(n) for n in names] == [256, 256, 256]
        kernel.open_queues(names[2], 1)
        assert write(numvfs(root), "0") == errno.EBUSY
        uacce = root / "sys" / "class" / "uacce"
        assert [(uacce / n / "available_instances").read_text() for n in names] == [
            "0\n",
            "0\n",
            "255\n",
        ]
        kernel.open_queues(names[2], -1)
        assert write(numvfs(root), "0") == 0
        assert numvfs(root).read_text() == "0\n"
        assert sorted(p.name for p in uacce.iterdir()) == ["hisi_sec2-0"]
        assert not any((root / "dev" / n).exists() for n in names)
        pf_dir = (root / "sys" / "bus" / "pci" / "devices" / SEC0).resolve()
        assert not list(pf_dir.glob("virtfn*"))


def test_a_vf_held_by_the_test_blocks_the_disable(kernel: SriovKernel, mnt: Path) -> None:
    """hold() marks a VF in use whatever its queues say; release lets the disable through."""
    assert write(numvfs(mnt), "2") == 0
    kernel.hold(kernel.vfs_of(SEC0)[0])
    assert write(numvfs(mnt), "0") == errno.EBUSY
    kernel.hold(kernel.vfs_of(SEC0)[0], held=False)
    assert write(numvfs(mnt), "0") == 0


def test_uacce_ids_are_the_lowest_free_and_reused(kernel: SriovKernel, mnt: Path) -> None:
    """VFs take the lowest free ids across drivers, and get them back after a removal."""
    hpre0 = "0000:79:00.0"
    assert write(numvfs(mnt), "2") == 0
    assert write(numvfs(mnt, hpre0), "1") == 0
    assert kernel.vfs_of(hpre0) == ["hisi_hpre-8"]
    assert write(numvfs(mnt), "0") == 0
    assert write(numvfs(mnt, hpre0), "0") == 0
    assert write(numvfs(mnt, hpre0), "3") == 0
    assert kernel.vfs_of(hpre0) == ["hisi_hpre-6", "hisi_hpre-7", "hisi_hpre-8"]


def test_a_vf_reports_its_pfs_isolation(tmp_path: Path) -> None:
    """A VF made while its PF is isolated shows isolate 1, as hisi_qm_get_isolate_state does."""
    kernel = SriovKernel(
        tmp_path / "backing", [kunpeng_pf("hisi_sec2", 0, 0, attrs={"isolate": "1"})]
    )
    with kernel.mounted(tmp_path / "mnt") as root:
        assert write(numvfs(root), "1") == 0
        name = kernel.vfs_of(SEC0)[0]
        assert (root / "sys" / "class" / "uacce" / name / "isolate").read_text() == "1\n"


def test_no_driver_bound_is_enoent(tmp_path: Path) -> None:
    """A PF with no driver bound cannot configure SR-IOV: ENOENT, as the PCI core answers."""
    kernel = SriovKernel(tmp_path / "backing", [kunpeng_pf("hisi_sec2", 0, 0, driver_bound=False)])
    with kernel.mounted(tmp_path / "mnt") as root:
        assert write(numvfs(root), "1") == errno.ENOENT


def test_other_attributes_are_read_only_and_the_tree_cannot_be_changed(mnt: Path) -> None:
    """Opening an attribute without a store for writing is EACCES; creating a file is EPERM."""
    pf_dir = mnt / "sys" / "bus" / "pci" / "devices" / SEC0
    assert write(pf_dir / "sriov_totalvfs", "1") == errno.EACCES
    with pytest.raises(PermissionError):
        (pf_dir / "new_file").write_text("x")


def test_a_read_only_mount_refuses_with_erofs(kernel: SriovKernel, tmp_path: Path) -> None:
    """/sys mounted read-only: the write fails with EROFS before reaching the kernel's store."""
    with kernel.mounted(tmp_path / "mnt", read_only=True) as root:
        assert write(numvfs(root), "1") == errno.EROFS
    assert kernel.writes == []


def test_a_shell_echo_changes_the_count(kernel: SriovKernel, mnt: Path) -> None:
    """What the manual guides do (``echo 2 > .../sriov_numvfs``) works on the mount."""
    subprocess.run(["sh", "-c", f"echo 2 > {numvfs(mnt)}"], check=True)
    assert len(kernel.vfs_of(SEC0)) == 2
    result = subprocess.run(["sh", "-c", f"echo 3 > {numvfs(mnt)}"], check=False)
    assert result.returncode != 0  # dash says "I/O error" for any failed write
    assert kernel.writes[-1] == (SEC0, "3", errno.EBUSY)
    assert len(kernel.vfs_of(SEC0)) == 2


def test_vfs_of_the_initial_tree_are_idle_with_the_queues_they_show(tmp_path: Path) -> None:
    """VFs built into the starting tree count as idle: opening one of their queues blocks."""
    pf = kunpeng_pf("hisi_zip", 0, 0)
    kernel = SriovKernel(tmp_path / "backing", with_vfs([pf], [2]))
    names = kernel.vfs_of("0000:75:00.0")
    assert [kernel.queues(n) for n in names] == [384, 384]
    kernel.open_queues(names[1], 2)
    with kernel.mounted(tmp_path / "mnt") as root:
        assert write(numvfs(root, "0000:75:00.0"), "0") == errno.EBUSY
