"""A Kunpeng sysfs that answers ``sriov_numvfs`` writes as the kernel does, served over FUSE.

The tree is built by :mod:`kae_deviceplugin.testing.sysfs_builder` in a backing directory and
served at a mount point by :class:`tests.support.fuse_mount.FuseMount`. A write to a PF's
``sriov_numvfs`` runs the kernel's rules (PCI core ``sriov_numvfs_store`` in
``drivers/pci/iov.c`` and the HiSilicon QM driver's ``hisi_qm_sriov_enable``/``_disable``; see
FACTS.md sections 3 and 12) inside the write, as the kernel does:

- not a number: EINVAL; above ``sriov_totalvfs``: ERANGE; the count it already has: success,
  nothing changes; no driver bound to the PF: ENOENT;
- nonzero to another nonzero: EBUSY (the PCI core: disable first);
- to 0 while a VF is in use (its ``available_instances`` below its queues, or held by the test):
  EBUSY, and the idle VFs checked before the busy one are left frozen (``qm_try_frozen_vfs``:
  all their queues taken, ``available_instances`` 0) until a disable succeeds;
- 0 to N: the VFs appear inside the write, each whole (PCI function, ``physfn`` and ``virtfn<i>``
  links, the driver bound, its uacce device with the lowest free id, its class link and /dev
  node), their queues split as ``qm_vf_q_assign`` splits them: the PF keeps ``pf_q_num`` (the
  module parameter if the tree has it, else 256) and the VFs share the rest of 1024 equally, the
  remainder to the last;
- N to 0: the VFs go, last first, each uacce device before its function.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from kae_deviceplugin.testing.sysfs_builder import (
    DeviceSpec,
    add_device,
    build_tree,
    find_function_dir,
    find_uacce_dir,
    remove_device,
    set_attribute,
)
from kae_deviceplugin.testing.sysfs_layout import LAYOUTS
from kae_deviceplugin.testing.sysfs_trees import PF_QUEUES, QUEUES_PER_ENGINE, vf_of
from tests.support.fuse_mount import FuseMount

_U16_MAX = 0xFFFF
# Mounting needs /dev/fuse and root. Where they are missing the tests skip, saying so; CI, which
# has them, sets KAE_REQUIRE_FUSE=1 so that a lost /dev/fuse fails instead of skipping.
_MISSING = (
    None
    if os.access("/dev/fuse", os.R_OK | os.W_OK) and os.geteuid() == 0
    else "needs /dev/fuse and root to mount a FUSE file system"
)
if _MISSING and os.environ.get("KAE_REQUIRE_FUSE") == "1":
    raise RuntimeError(f"KAE_REQUIRE_FUSE=1 but the FUSE sysfs {_MISSING}")
NEEDS_FUSE = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


class SriovKernel:
    """The kernel's side of ``sriov_numvfs`` over a backing tree built from ``specs``.

    Tests change the tree through :meth:`open_queues` (a process opening queues of a device, as
    a real ``open`` of ``/dev/<name>`` takes one) and :meth:`hold` (a VF in use however the test
    likes); everything else (the daemon's reads, the applier's writes) goes through the mount.
    """

    def __init__(self, backing: Path, specs: Sequence[DeviceSpec]) -> None:
        self.backing = backing
        build_tree(backing, specs)
        self._pfs = {s.pci_address: s for s in specs if s.parent_pf is None}
        # VF name -> queues it was given; VFs of the initial tree got the split of their count.
        self._queues: dict[str, int] = {}
        self._held: set[str] = set()
        self._frozen: set[str] = set()
        self.writes: list[tuple[str, str, int]] = []  # (PF, what was written, errno or 0)
        # The VFs of the starting tree are idle: the queues they show are all they have.
        for pf in self._pfs:
            for name in self.vfs_of(pf):
                self._queues[name] = self._available(name)

    # -- what tests do -----------------------------------------------------------------------

    def vfs_of(self, pf_address: str) -> list[str]:
        """The uacce names of the PF's VFs, in VF index order."""
        fn = find_function_dir(self.backing, pf_address)
        links = sorted(fn.glob("virtfn*"), key=lambda p: int(p.name[len("virtfn") :]))
        return [n.name for link in links for n in sorted((link.resolve() / "uacce").glob("*"))]

    def queues(self, name: str) -> int:
        """The queues the kernel gave a VF."""
        return self._queues[name]

    def open_queues(self, name: str, count: int) -> None:
        """A process opens (``count`` > 0) or closes (< 0) queues of a device."""
        available = self._available(name)
        set_attribute(self.backing, name, "available_instances", str(available - count))

    def _available(self, name: str) -> int:
        udir = find_uacce_dir(self.backing, name)
        attr_dir = udir / "attrs" if (udir / "attrs").is_dir() else udir
        return int((attr_dir / "available_instances").read_text())

    def hold(self, name: str, held: bool = True) -> None:
        """Mark a VF in use (or not) without touching its queues."""
        (self._held.add if held else self._held.discard)(name)

    @contextmanager
    def mounted(self, mountpoint: Path, *, read_only: bool = False) -> Iterator[Path]:
        """Serve the tree at ``mountpoint`` (which gets ``sys/`` and ``dev/``)."""
        mountpoint.mkdir(parents=True, exist_ok=True)
        with FuseMount(self.backing, mountpoint, self.write, _writable, read_only=read_only):
            yield mountpoint

    # -- the kernel --------------------------------------------------------------------------

    def write(self, path: str, data: bytes) -> int:
        """A write to a file of the tree: 0 or the errno the kernel answers."""
        if not _writable(path):
            return errno.EACCES
        pf = Path(path).parent.name
        code = self._store(pf, data)
        self.writes.append((pf, data.decode(errors="replace").strip(), code))
        return code

    def _store(self, pf: str, data: bytes) -> int:
        wanted = _kstrtou16(data)
        if wanted is None:
            return errno.EINVAL
        fn = find_function_dir(self.backing, pf)
        if wanted > int((fn / "sriov_totalvfs").read_text()):
            return errno.ERANGE
        present = self.vfs_of(pf)
        if wanted == len(present) or not (fn / "driver").is_symlink():
            return 0 if wanted == len(present) else errno.ENOENT
        if wanted == 0:
            return self._disable(pf, present)
        if present:
            return errno.EBUSY
        self._enable(pf, wanted)
        return 0

    def _disable(self, pf: str, vfs: list[str]) -> int:
        for name in vfs:
            if name not in self._frozen and self._in_use(name):
                return errno.EBUSY  # "Task is using its VF!"; those checked stay frozen
            if name not in self._frozen:
                set_attribute(self.backing, name, "available_instances", "0")
                self._frozen.add(name)
        for name in reversed(vfs):
            remove_device(self.backing, name, remove_function=True)
            self._frozen.discard(name)
            self._held.discard(name)
            self._queues.pop(name, None)
        return 0

    def _in_use(self, name: str) -> bool:
        return name in self._held or self._available(name) < self._queues[name]

    def _enable(self, pf: str, count: int) -> None:
        spec = self._pfs[pf]
        isolate = _read(find_uacce_dir(self.backing, spec.name), "isolate")
        for index, queues in enumerate(_split(self._pf_queues(pf), count)):
            name_id = self._free_id()
            attrs: dict[str, str | None] = {"available_instances": str(queues)}
            if isolate is not None and "isolate" in _layout_files(spec):
                attrs["isolate"] = isolate  # a VF reports its PF's isolation
            vf = vf_of(spec, index, name_id, attrs=attrs)
            add_device(self.backing, vf)
            self._queues[vf.name] = queues

    def _pf_queues(self, pf: str) -> int:
        driver = self._pfs[pf].driver
        value = _read(self.backing / "sys" / "module" / driver / "parameters", "pf_q_num")
        return int(value) if value is not None else PF_QUEUES

    def _free_id(self) -> int:
        # uacce ids come from one allocator for all drivers, lowest free first.
        taken = {int(p.name.rpartition("-")[2]) for p in self._class_entries()}
        return next(i for i in range(len(taken) + 1) if i not in taken)

    def _class_entries(self) -> list[Path]:
        class_dir = self.backing / "sys" / "class" / "uacce"
        return [p for p in class_dir.iterdir() if p.name.rpartition("-")[2].isdigit()]


def _split(pf_queues: int, count: int) -> list[int]:
    # qm_vf_q_assign: the rest of the controller's queues, equally, the remainder to the last.
    if count == 0:
        return []
    share, rest = divmod(QUEUES_PER_ENGINE - pf_queues, count)
    return [share] * (count - 1) + [share + rest]


def _kstrtou16(data: bytes) -> int | None:
    # kstrtou16(buf, 0, ...): one trailing newline allowed, the base from the prefix (0x: 16,
    # a leading 0: 8), digits only (no sign, no spaces), at most 0xffff.
    text = data.decode(errors="replace")
    text = text[:-1] if text.endswith("\n") else text
    base = 16 if text[:2].lower() == "0x" else 8 if text[:1] == "0" and len(text) > 1 else 10
    digits = text[2:] if base == 16 else text
    if not digits or not all(
        c in "0123456789abcdefABCDEF"[: base + (6 if base == 16 else 0)] for c in digits
    ):
        return None
    value = int(digits, base)
    return value if value <= _U16_MAX else None


def _writable(path: str) -> bool:
    return os.path.basename(path) == "sriov_numvfs"


def _read(directory: Path, name: str) -> str | None:
    try:
        return (directory / name).read_text().strip()
    except OSError:
        return None


def _layout_files(spec: DeviceSpec) -> tuple[str, ...]:
    return LAYOUTS[spec.layout]
