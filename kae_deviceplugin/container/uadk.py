"""UADK's own environment variables, set for the NUMA nodes of the allocated devices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kae_deviceplugin.core.model import UacceDevice

UADK_UNKNOWN_NODE = 0  # where UADK counts a device whose NUMA node sysfs says is -1

# UADK v2's per-class context variables, WD_<CLASS>_CTX_NUM, as UADK documents them
# (docs/wd_environment_variable in the UADK repository) and parses them (wd_util.c): one
# `<part>:<count>@<numa node>` per part, comma-separated. Compression has four parts, every other
# class two; a malformed value, or a class no device of the container serves, makes UADK's init
# fail. Row: class, the uacce `algorithms` entries that make a device serve it, the value's parts.
UADK_CTX_CLASSES: tuple[tuple[str, frozenset[str], tuple[str, ...]], ...] = (
    ("RSA", frozenset({"rsa"}), ("sync", "async")),
    ("DH", frozenset({"dh"}), ("sync", "async")),
    ("ECC", frozenset({"ecdh", "ecdsa", "x25519", "x448", "sm2"}), ("sync", "async")),
    ("CIPHER", frozenset({"cipher"}), ("sync", "async")),
    ("DIGEST", frozenset({"digest"}), ("sync", "async")),
    ("AEAD", frozenset({"aead"}), ("sync", "async")),
    (
        "COMP",
        frozenset({"zlib", "gzip", "deflate", "lz77_zstd"}),
        ("sync-comp", "sync-decomp", "async-comp", "async-decomp"),
    ),
)


def uadk_numa_env(
    devices: Sequence[UacceDevice], queues: Mapping[str, int] | None = None
) -> dict[str, str]:
    """WD_<CLASS>_CTX_NUM: contexts per part on each NUMA node of the devices serving a class.

    Only classes that some allocated device lists in its ``algorithms`` get a variable. Without
    ``queues`` each part gets one context. With ``queues`` (PCI address -> the hardware queues
    the container holds on that device: a share of a shared device) a node's parts split its
    devices' queues evenly, each UADK context taking one queue, and each at least one, since a
    part of 0 is malformed to UADK: a share smaller than the class's parts (4 for COMP, 2 for the
    rest) gets one context per part all the same. Every class of the engine gets the whole
    share: a process normally initialises one class, and one that initialises several opens
    contexts for each.

    A device whose NUMA node is unknown (a VM: ``numa_node`` -1) is one UADK itself counts as
    on node 0 (wd.c, ``get_dev_info``), so a share names it ``@0``: without the variable UADK
    would size the share by its own default, not by the queues held. Without ``queues`` (the
    hint) such a device gets no variable: UADK's own default then takes the same node 0.
    """
    env: dict[str, str] = {}
    for name, algorithms, parts in UADK_CTX_CLASSES:
        serving = [d for d in devices if algorithms.intersection(d.algorithms)]
        node_of = {d.pci_address: _uadk_node(d, shared=queues is not None) for d in serving}
        nodes = sorted({n for n in node_of.values() if n is not None})
        if not nodes:
            continue
        counts = dict.fromkeys(nodes, 1)
        if queues is not None:
            for node in nodes:
                held = sum(queues.get(a, 0) for a, n in node_of.items() if n == node)
                counts[node] = max(1, held // len(parts))
        env[f"WD_{name}_CTX_NUM"] = ",".join(f"{p}:{counts[n]}@{n}" for n in nodes for p in parts)
    return env


def _uadk_node(device: UacceDevice, *, shared: bool) -> int | None:
    """The node UADK puts ``device`` on: its own, or 0 when unknown for a share (see above)."""
    if device.numa_node is not None:
        return device.numa_node
    return UADK_UNKNOWN_NODE if shared else None
