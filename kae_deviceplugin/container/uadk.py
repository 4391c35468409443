"""UADK's own environment variables, set for the NUMA nodes of the allocated devices."""

from __future__ import annotations

from collections.abc import Sequence

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


def uadk_numa_env(devices: Sequence[UacceDevice]) -> dict[str, str]:
    """WD_<CLASS>_CTX_NUM: one context per part on each NUMA node of the devices serving a class.

    Only classes that some allocated device lists in its ``algorithms`` get a variable.
    """
    env: dict[str, str] = {}
    for name, algorithms, parts in UADK_CTX_CLASSES:
        serving = [d for d in devices if algorithms.intersection(d.algorithms)]
        nodes = sorted({d.numa_node for d in serving if d.numa_node is not None})
        if nodes:
            env[f"WD_{name}_CTX_NUM"] = ",".join(f"{p}:1@{n}" for n in nodes for p in parts)
    return env
