"""UADK's own environment variables, set for the NUMA nodes of the allocated devices."""

from __future__ import annotations

from collections.abc import Sequence

from kae_deviceplugin.core.model import UacceDevice


def uadk_numa_env(algorithms: Sequence[str], devices: Sequence[UacceDevice]) -> dict[str, str]:
    """WD_<ALG>_CTX_NUM asking UADK for one sync and one async context per allocated NUMA node."""
    nodes = sorted({d.numa_node for d in devices if d.numa_node is not None})
    if not nodes:
        return {}
    value = ",".join(f"sync:1@{node},async:1@{node}" for node in nodes)
    return {f"WD_{algorithm}_CTX_NUM": value for algorithm in algorithms}
