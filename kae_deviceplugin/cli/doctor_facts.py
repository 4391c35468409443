"""`doctor`'s rows on the node's KAE facts (issue 37): SVA, CMA and the drivers' provenance.

* ``sva``: how many devices run without SVA (uacce ``flags``, ``api``); those take their memory
  from CMA, so then
* ``cma``: ``/proc/meminfo``'s CmaTotal and CmaFree. Below :data:`CMA_LOW` free (or no CMA
  area at all) a queue opened without SVA may find no memory: KAE's driver logs "dma_num ...
  not enough" and the open fails. The threshold is this project's rule of thumb, not KAE's.
* ``driver <name>``: each loaded driver's provenance (out-of-tree: KAE's driver packages; in
  tree: the kernel's own; built in), version, ``uacce_mode`` and ``pf_q_num``. A warning where
  KAE's out-of-tree drivers and the kernel's own are loaded side by side: KAE's packages ship
  all three, so the kernel's was likely loaded first (an initramfs older than the packages).

An absent engine's likely cause is the hardware rows' (:mod:`kae_deviceplugin.cli.hardware`).
"""

from __future__ import annotations

from pathlib import Path

from kae_deviceplugin.cli.checks import Row, Status
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.attributes import read_attribute
from kae_deviceplugin.discovery.node_facts import Cma, DriverFacts, NodeFacts

MIB = 1024 * 1024
CMA_LOW = 64 * MIB
SHOWN_NAMES = 6
UACCE_MODES = {0: "crypto API only", 1: "uacce with SVA", 2: "uacce without SVA"}
CMA_FIX = (
    "raise cma= on the kernel command line (GRUB_CMDLINE_LINUX, then regenerate the GRUB "
    "config) and reboot, or stop the processes that hold queues without SVA"
)


def check_node_facts(facts: NodeFacts, inventory: Inventory, proc_root: Path) -> list[Row]:
    """The SVA row (and CMA where a device runs without SVA), then one row per loaded driver."""
    return check_sva(facts, inventory, proc_root) + check_drivers(facts)


def _names(devices: list[str]) -> str:
    shown = ", ".join(devices[:SHOWN_NAMES])
    return shown + (f" and {len(devices) - SHOWN_NAMES} more" if len(devices) > SHOWN_NAMES else "")


def check_sva(facts: NodeFacts, inventory: Inventory, proc_root: Path) -> list[Row]:
    if not inventory.devices:
        return []
    total = len(inventory)
    unknown = [d.name for d in inventory if d.sva is None]
    note = f"; {len(unknown)} unknown (flags unreadable: {_names(unknown)})" if unknown else ""
    without = [d.name for d in facts.without_sva(inventory)]
    if not without:
        return [
            Row("sva", Status.OK, f"{total - len(unknown)} of {total} devices run with SVA{note}")
        ]
    detail = (
        f"{len(without)} of {total} devices run without SVA ({_names(without)}): their queues' "
        f"memory comes from CMA{note}"
    )
    return [Row("sva", Status.OK, detail), check_cma(facts.cma, proc_root)]


def check_cma(cma: Cma, proc_root: Path) -> Row:
    """Whether the CMA area can still give devices without SVA their memory."""
    meminfo = proc_root / "meminfo"
    if cma.total is None:
        if not isinstance(read_attribute(str(meminfo)), str):
            return Row("cma", Status.SKIP, f"cannot read {meminfo}")
        detail = f"{meminfo} shows no CMA area (a kernel built without CONFIG_CMA)"
        fix = "devices without SVA take their memory from CMA: boot a kernel with CMA and cma="
        return Row("cma", Status.WARN, detail, (fix,))
    shown = f"CmaFree {(cma.free or 0) // MIB} MiB of CmaTotal {cma.total // MIB} MiB"
    if cma.total == 0 or cma.free is None or cma.free < CMA_LOW:
        detail = (
            f"{shown}, below {CMA_LOW // MIB} MiB free: a queue opened without SVA may find no "
            "memory (KAE's driver logs 'dma_num ... not enough')"
        )
        return Row("cma", Status.WARN, detail, (CMA_FIX,))
    return Row("cma", Status.OK, shown)


def describe(driver: DriverFacts) -> str:
    """A loaded driver in one phrase: provenance, version, mode, PF queues."""
    parts = {
        "out-of-tree": "out-of-tree module (KAE's driver packages)",
        "in-tree": "in-tree module (the kernel's own)",
        "built-in": "built into the kernel",
    }[driver.provenance or "in-tree"]
    if driver.version:
        parts += f", version {driver.version}"
    elif driver.srcversion:
        parts += f", srcversion {driver.srcversion}"
    if driver.uacce_mode is not None:
        meaning = UACCE_MODES.get(driver.uacce_mode, "unknown mode")
        parts += f", uacce_mode {driver.uacce_mode} ({meaning})"
    if driver.pf_q_num is not None:
        parts += f", pf_q_num {driver.pf_q_num}"
    return parts


def check_drivers(facts: NodeFacts) -> list[Row]:
    """One row per loaded KAE driver; a warning on the kernel's own beside KAE's."""
    loaded = [d for d in facts.drivers.values() if d.loaded]
    kae = [d.driver for d in loaded if d.provenance == "out-of-tree"]
    rows = []
    for driver in loaded:
        check, detail = f"driver {driver.driver}", describe(driver)
        if not kae or driver.provenance == "out-of-tree":
            rows.append(Row(check, Status.OK, detail))
            continue
        detail += (
            f", while {', '.join(kae)} are KAE's out-of-tree modules: the kernel's own "
            f"{driver.driver} was likely loaded first (an initramfs older than KAE's packages)"
        )
        fix = (
            f"on the node: dracut -f (rebuild the initramfs with KAE's drivers) and reboot, or "
            f"modprobe -r {driver.driver} && modprobe {driver.driver}"
        )
        rows.append(Row(check, Status.WARN, detail, (fix,)))
    return rows
