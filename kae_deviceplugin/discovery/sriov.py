"""What sysfs says of each KAE PF's SR-IOV: its VF limit, its VFs now, and the queues they got.

Read for the VF profiles (``daemon/vf_profiles.py``) on a tick where a profile is set, never in
a quiet tick otherwise: a handful of small files per PF. Never raises, as the rest of discovery.
"""

from __future__ import annotations

import os

from kae_deviceplugin.core.engines import ENGINES_BY_NAME
from kae_deviceplugin.core.model import Function, Inventory
from kae_deviceplugin.core.vf_plan import PfSriov
from kae_deviceplugin.discovery.attributes import PCI_ADDRESS, parse_int, read_attribute

# The QM drivers' pf_q_num default, where the module does not show its parameter.
DEFAULT_PF_QUEUES = 256


def pf_function_dir(sysfs_root: str, pci_address: str) -> str:
    """``<sysfs>/bus/pci/devices/<address>``: where ``sriov_numvfs`` is read and written."""
    return os.path.join(sysfs_root, "bus", "pci", "devices", pci_address)


def read_pfs(sysfs_root: str, inventory: Inventory) -> tuple[PfSriov, ...]:
    """Every PF of the inventory with its SR-IOV state, sorted by PCI address."""
    pfs = {d.pci_address: d for d in inventory if d.function is Function.PF}
    return tuple(_read_pf(sysfs_root, pfs[a].engine, a) for a in sorted(pfs))


def _read_pf(sysfs_root: str, engine: str, pci_address: str) -> PfSriov:
    fn = pf_function_dir(sysfs_root, pci_address)
    return PfSriov(
        pci_address=pci_address,
        engine=engine,
        total_vfs=parse_int(read_attribute(os.path.join(fn, "sriov_totalvfs"))),
        num_vfs=parse_int(read_attribute(os.path.join(fn, "sriov_numvfs"))),
        vfs=_virtfns(fn),
        pf_queues=_pf_queues(sysfs_root, engine),
    )


def _virtfns(fn: str) -> tuple[str, ...]:
    try:
        names = [n for n in os.listdir(fn) if n.startswith("virtfn") and n[6:].isdigit()]
    except OSError:
        return ()
    found = []
    for name in sorted(names, key=lambda n: int(n[6:])):
        try:
            target = os.path.basename(os.readlink(os.path.join(fn, name)))
        except OSError:
            continue
        if PCI_ADDRESS.match(target):
            found.append(target)
    return tuple(found)


def _pf_queues(sysfs_root: str, engine: str) -> int:
    driver = ENGINES_BY_NAME[engine].driver if engine in ENGINES_BY_NAME else engine
    param = os.path.join(sysfs_root, "module", driver, "parameters", "pf_q_num")
    value = parse_int(read_attribute(param))
    return value if value is not None and value > 0 else DEFAULT_PF_QUEUES
