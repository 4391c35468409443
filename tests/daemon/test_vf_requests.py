"""The daemon hands sriov_numvfs writes to the vf-writer through a shared directory: the kernel's
errno comes back as if it had written itself, and nothing but a KAE PF's sriov_numvfs is written."""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kae_deviceplugin.daemon.vf_requests import request_writer, serve_requests
from kae_deviceplugin.testing.sysfs_builder import DeviceSpec
from kae_deviceplugin.testing.sysfs_trees import two_socket
from tests.support.harness import short_tmpdir
from tests.support.sriov_kernel import NEEDS_FUSE, SriovKernel

pytestmark = NEEDS_FUSE
SEC0 = "0000:76:00.0"
# An SR-IOV PF of the same vendor that is no KAE engine (its device ID is none of theirs).
FOREIGN = DeviceSpec(
    name="hisi_foo-9", pci_address="0000:7b:00.0", root_port="0000:7a:00.0", numa_node=0
)


@pytest.fixture
def setup() -> Iterator[tuple[SriovKernel, Path]]:
    """A kernel-like sysfs and a vf-writer serving requests in ``<tmp>/requests`` on a thread."""
    with short_tmpdir() as tmp:
        kernel = SriovKernel(tmp / "backing", [*two_socket(), FOREIGN])
        requests = tmp / "requests"
        requests.mkdir()
        with kernel.mounted(tmp / "mnt") as root:
            stop = threading.Event()
            writer = threading.Thread(
                target=serve_requests, args=(str(root / "sys"), requests, stop.is_set)
            )
            writer.start()
            try:
                yield kernel, requests
            finally:
                stop.set()
                writer.join(timeout=30)


def test_writes_go_through_the_writer_and_its_errno_comes_back(
    setup: tuple[SriovKernel, Path],
) -> None:
    """2 VFs are made through the writer; 2 -> 4 comes back as the kernel's EBUSY."""
    kernel, requests = setup
    write = request_writer(requests, timeout=60)
    write(SEC0, 2)
    assert len(kernel.vfs_of(SEC0)) == 2
    with pytest.raises(OSError) as caught:
        write(SEC0, 4)
    assert caught.value.errno == errno.EBUSY
    assert kernel.writes == [(SEC0, "2", 0), (SEC0, "4", errno.EBUSY)]


@pytest.mark.parametrize(
    ("pf", "count", "code"),
    [
        ("0000:74:02.0", 1, errno.EPERM),  # a root port: not a KAE PF
        (FOREIGN.pci_address, 1, errno.EPERM),  # SR-IOV, Huawei's, but no KAE engine
        ("0000:76:00.0x", 1, errno.EPERM),  # not a PCI address
        (SEC0, 64, errno.ERANGE),  # above its sriov_totalvfs (63)
    ],
)
def test_anything_but_a_kae_pfs_count_is_refused_without_writing(
    setup: tuple[SriovKernel, Path], pf: str, count: int, code: int
) -> None:
    """The writer checks the function and the count first: refused, sysfs untouched."""
    kernel, requests = setup
    with pytest.raises(OSError) as caught:
        request_writer(requests, timeout=60)(pf, count)
    assert caught.value.errno == code
    assert kernel.writes == []
