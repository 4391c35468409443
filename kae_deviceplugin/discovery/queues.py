"""The fixed hardware-queue total of each KAE function, which no sysfs attribute states.

``available_instances`` is the number of *free* queues and moves as processes open the device,
so the total comes from how the HiSilicon QM driver (``drivers/crypto/hisilicon/qm.c`` and the
``*_main.c`` of hpre, sec2 and zip, mainline and openEuler alike) splits a controller:

* The controller has a fixed number of queues: 4096 on V1 hardware (PCI revision 0x20), 1024
  on V2 (0x21, Kunpeng 920). V3 (0x30) reads it from a capability register that sysfs does not
  show; 1024 is assumed there (Kunpeng 920 V3 documents 1024 per engine; an inference).
* The PF keeps ``pf_q_num`` of them: a module parameter, readable (0444) in
  ``/sys/module/<driver>/parameters/pf_q_num``; its default differs by driver and kernel (64
  for hpre and zip, 64 or 256 for sec2), hence read, never assumed.
* The rest is shared by the VFs (the PF's ``sriov_numvfs``): an equal share each, the
  remainder to the last VF, as ``qm_vf_q_assign`` does; newer kernels cap each VF at the
  function maximum (on V2 the controller total, so no cap) and then hand the remainder out one
  queue at a time from the last VF down; both agree whenever the cap does not bite.
* VF ``i`` (1-based) is the PF's ``virtfn<i-1>``.

Fallback, when the parameter or the PF's SR-IOV files cannot be read (another driver build, a
restricted sysfs): the largest ``available_instances`` seen for the function since the daemon
started. That equals the total whenever no queue was in use at some scan (at boot, between
jobs) and is a lower bound otherwise, never more than the hardware has.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kae_deviceplugin.core.engines import ENGINES_BY_NAME
from kae_deviceplugin.core.model import Function, Inventory, UacceDevice
from kae_deviceplugin.discovery.attributes import parse_int, read_attribute, resolve_dir

CONTROLLER_QUEUES = {0x20: 4096, 0x21: 1024, 0x30: 1024}  # by PCI revision
DEFAULT_CONTROLLER_QUEUES = 1024  # a revision this table does not know (later hardware)


def vf_shares(total: int, num_vfs: int, max_per_vf: int | None = None) -> list[int]:
    """The queues of VF 1..num_vfs when ``total`` queues are left for the VFs (qm_vf_q_assign)."""
    if num_vfs <= 0 or total < num_vfs:
        return []  # the kernel refuses to enable the VFs
    cap = total if max_per_vf is None else max_per_vf
    share, remainder = divmod(total, num_vfs)
    shares = [0] * num_vfs
    for index in range(num_vfs - 1, -1, -1):  # the kernel walks from the last VF down
        if index == num_vfs - 1 and share + remainder <= cap:
            count, remainder = share + remainder, 0
        elif remainder > 0:
            count, remainder = share + 1, remainder - 1
        else:
            count = share
        shares[index] = min(count, cap)
    return shares


def _read_int(path: str) -> int | None:
    value = parse_int(read_attribute(path))
    return value if value is not None and value >= 0 else None


class QueueTotals:
    """Each function's queue total by PCI address, from the driver's rules, else what was seen.

    Kept across scans: the fallback remembers the largest free count seen per function.
    """

    def __init__(self, sysfs_root: Path) -> None:
        self.sysfs_root = str(sysfs_root.resolve())
        self._seen: dict[str, int] = {}

    def update(self, inventory: Inventory) -> dict[str, int]:
        """The totals for ``inventory``'s functions (a function with no figure at all is left
        out); forgets functions that are gone."""
        present = {d.pci_address for d in inventory}
        self._seen = {a: n for a, n in self._seen.items() if a in present}
        totals: dict[str, int] = {}
        for device in inventory:
            total = self.from_driver(device)
            if total is None:
                total = self._fallback(device)
            if total is not None:
                totals[device.pci_address] = total
        return totals

    def _fallback(self, device: UacceDevice) -> int | None:
        free = device.available_instances
        best = max(free if free is not None else -1, self._seen.get(device.pci_address, -1))
        if best < 0:
            return None
        self._seen[device.pci_address] = best
        return best

    def pf_queues(self, engine: str) -> int | None:
        driver = ENGINES_BY_NAME[engine].driver
        return _read_int(f"{self.sysfs_root}/module/{driver}/parameters/pf_q_num")

    def from_driver(self, device: UacceDevice) -> int | None:
        """The total the driver's split gives, or None when something it needs is unreadable."""
        pf_queues = self.pf_queues(device.engine)
        if pf_queues is None:
            return None
        if device.function is Function.PF:
            return pf_queues
        pf_dir = resolve_dir(f"{device.pci_path}/physfn")
        if pf_dir is None:
            return None
        num_vfs = _read_int(f"{pf_dir}/sriov_numvfs")
        revision = _read_int(f"{pf_dir}/revision")
        index = _vf_index(pf_dir, device.pci_path)
        if num_vfs is None or revision is None or index is None or index >= num_vfs:
            return None
        controller = CONTROLLER_QUEUES.get(revision, DEFAULT_CONTROLLER_QUEUES)
        shares = vf_shares(controller - pf_queues, num_vfs)
        return shares[index] if shares else None


def _vf_index(pf_dir: str, vf_dir: str) -> int | None:
    """k for the PF's ``virtfn<k>`` link that leads to ``vf_dir``."""
    try:
        names = os.listdir(pf_dir)
    except OSError:
        return None
    for name in names:
        linked = name.startswith("virtfn") and name[6:].isdigit()
        if linked and resolve_dir(f"{pf_dir}/{name}") == vf_dir:
            return int(name[6:])
    return None


def queue_totals(sysfs_root: Path, inventory: Inventory) -> Mapping[str, int]:
    """One look, without memory: the driver's figures, else the free counts of this scan."""
    return QueueTotals(sysfs_root).update(inventory)
