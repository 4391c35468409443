"""UADK's own environment variables, set for the NUMA nodes of the allocated devices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kae_deviceplugin.core.model import UacceDevice

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
    """
    env: dict[str, str] = {}
    for name, algorithms, parts in UADK_CTX_CLASSES:
        serving = [d for d in devices if algorithms.intersection(d.algorithms)]
        nodes = sorted({d.numa_node for d in serving if d.numa_node is not None})
        if not nodes:
            continue
        counts = dict.fromkeys(nodes, 1)
        if queues is not None:
            for node in nodes:
                held = sum(queues.get(d.pci_address, 0) for d in serving if d.numa_node == node)
                counts[node] = max(1, held // len(parts))
        env[f"WD_{name}_CTX_NUM"] = ",".join(f"{p}:{counts[n]}@{n}" for n in nodes for p in parts)
    return env
