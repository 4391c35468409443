"""The node-wide files a fake tree can hold beside its devices: CPUs, ``/proc/cpuinfo``,
``/proc/meminfo``, in the kernel's layout (issue 37, the node's KAE facts).

``<root>/sys/devices/system/cpu`` holds ``online``, ``possible``, ``present`` and per CPU
``topology/physical_package_id``, ``core_id``, ``package_cpus_list``, ``core_siblings_list``
and, on arm64, ``regs/identification/midr_el1`` and ``revidr_el1`` (printed ``0x%016llx``).
``<root>/proc`` sits beside ``<root>/sys`` as ``/proc`` beside ``/sys``: ``cpuinfo`` in arm64's
format (one block per CPU: ``CPU implementer``, ``CPU part``...; an x86 one only names the
model) and ``meminfo`` in ``fs/proc/meminfo.c``'s (a 16-column name and an 8-column figure in
kB; ``CmaTotal``/``CmaFree`` only on kernels built with CONFIG_CMA).

Real Kunpeng 920 sockets have 24 to 64 cores; the trees have a few per socket, which changes
nothing that is read here and keeps them small.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# MIDR_EL1 of a Kunpeng 920 core: implementer 0x48 (HiSilicon), variant 1, part 0xd01 (TSV110).
KUNPENG920_MIDR = 0x481FD010
KIB_PER_MIB = 1024


@dataclass(frozen=True)
class NodeSpec:
    """A node's CPUs and memory. ``midr`` None is a CPU without MIDR_EL1 (not arm64);
    ``cma_total_kib`` None a kernel without CMA (no Cma lines in meminfo)."""

    sockets: int = 2
    cpus_per_socket: int = 4
    midr: int | None = KUNPENG920_MIDR
    mem_total_kib: int = 256 * KIB_PER_MIB * 1024
    cma_total_kib: int | None = 64 * KIB_PER_MIB
    cma_free_kib: int | None = 60 * KIB_PER_MIB

    @property
    def cpus(self) -> int:
        return self.sockets * self.cpus_per_socket


def _write(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(value if value.endswith("\n") else value + "\n")
    os.replace(tmp, path)


def _range(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def add_node_files(root: Path, spec: NodeSpec) -> None:
    """Write the CPUs, ``proc/cpuinfo`` and ``proc/meminfo`` of ``spec`` under ``root``."""
    cpus = root / "sys" / "devices" / "system" / "cpu"
    every = _range(0, spec.cpus - 1)
    for name in ("online", "possible", "present"):
        _write(cpus / name, every)
    for index in range(spec.cpus):
        socket, core = divmod(index, spec.cpus_per_socket)
        first = socket * spec.cpus_per_socket
        package = _range(first, first + spec.cpus_per_socket - 1)
        topology = cpus / f"cpu{index}" / "topology"
        _write(topology / "physical_package_id", str(socket))
        _write(topology / "core_id", str(core))
        _write(topology / "package_cpus_list", package)
        _write(topology / "core_siblings_list", package)
        if spec.midr is not None:
            ident = cpus / f"cpu{index}" / "regs" / "identification"
            _write(ident / "midr_el1", f"0x{spec.midr:016x}")
            _write(ident / "revidr_el1", f"0x{0:016x}")
    _write(root / "proc" / "cpuinfo", cpuinfo(spec))
    set_meminfo(root, spec)


def cpuinfo(spec: NodeSpec) -> str:
    """``/proc/cpuinfo`` as arm64 prints it (``arch/arm64/kernel/cpuinfo.c``), or a minimal x86
    one."""
    blocks = []
    for index in range(spec.cpus):
        if spec.midr is None:
            blocks.append(f"processor\t: {index}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n")
            continue
        midr = spec.midr
        blocks.append(
            f"processor\t: {index}\n"
            "BogoMIPS\t: 200.00\n"
            "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
            "asimdrdm jscvt fcma dcpop asimddp asimdfhm\n"
            f"CPU implementer\t: 0x{midr >> 24 & 0xFF:02x}\n"
            "CPU architecture: 8\n"
            f"CPU variant\t: 0x{midr >> 20 & 0xF:x}\n"
            f"CPU part\t: 0x{midr >> 4 & 0xFFF:03x}\n"
            f"CPU revision\t: {midr & 0xF}\n"
        )
    return "\n".join(blocks) + "\n"


def meminfo(spec: NodeSpec) -> str:
    """``/proc/meminfo``: the lines around the CMA ones, in the kernel's order and format."""
    total = spec.mem_total_kib
    rows = [
        ("MemTotal", total),
        ("MemFree", total // 2),
        ("MemAvailable", total * 3 // 4),
        ("Buffers", 8192),
        ("Cached", total // 8),
        ("SwapCached", 0),
        ("SwapTotal", 0),
        ("SwapFree", 0),
        ("AnonHugePages", 0),
    ]
    if spec.cma_total_kib is not None:
        rows += [("CmaTotal", spec.cma_total_kib), ("CmaFree", spec.cma_free_kib or 0)]
    lines = [f"{name + ':':<16}{value:>8} kB" for name, value in rows]
    lines += [f"{name + ':':<16}{0:>5}" for name in ("HugePages_Total", "HugePages_Free")]
    lines += ["Hugepagesize:       2048 kB"]
    return "\n".join(lines) + "\n"


def set_meminfo(root: Path, spec: NodeSpec) -> None:
    """Replace ``proc/meminfo`` (a test changes CmaFree as the kernel's would)."""
    _write(root / "proc" / "meminfo", meminfo(spec))
