"""`doctor --mode dra`: does the node's container runtime apply CDI devices?

A DRA claim reaches its container only as CDI devices, and a runtime with CDI off runs the
container without them, silently (``container.runtime_cdi``). The driver then offers nothing and
refuses every claim; this row says so before anyone wonders why, naming the setting to change.
The runtime is what the node's kubelet reports to the API server; its setting is read from the
same file the driver reads.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kae_deviceplugin.apiserver.seam import NODES, JsonObject
from kae_deviceplugin.cli.checks import Row, Status
from kae_deviceplugin.cli.doctor_slices import API_TIMEOUT, Connect, real_connect
from kae_deviceplugin.container.runtime_cdi import CONTAINERD_CONFIG, ISULAD_CONFIG, runtime_of
from kae_deviceplugin.errors import ApiError

CHECK = "runtime cdi"


async def _node(connect: Connect, kubeconfig: Path | None, node: str) -> JsonObject:
    api = connect(kubeconfig)
    try:
        async with asyncio.timeout(API_TIMEOUT):
            return await api.get(NODES, node)
    finally:
        await api.close()


def check_runtime_cdi(
    node: str | None,
    kubeconfig: Path | None,
    runtime_config: Path | None,
    connect: Connect | None = None,
) -> list[Row]:
    """One row: the runtime applies CDI devices (OK), does not (FAIL, with the fix), or cannot
    be told (SKIP, with why)."""
    if not node:
        return [Row(CHECK, Status.SKIP, "no node name: its runtime is not known")]
    try:
        found = asyncio.run(_node(connect or real_connect, kubeconfig, node))
    except (ApiError, TimeoutError) as err:
        detail = f"cannot read node {node} from the API server: {err or 'no answer'}"
        return [Row(CHECK, Status.SKIP, detail)]
    containerd, isulad = runtime_config or CONTAINERD_CONFIG, runtime_config or ISULAD_CONFIG
    support = runtime_of(found, containerd, isulad)  # as the driver reads it
    if support.applies is None:
        detail = f"{support.runtime}: cannot tell whether it applies CDI devices"
        return [Row(CHECK, Status.SKIP, detail)]
    if support.refused:
        fix = "then restart the driver's pod, or label the node for a device-plugin configuration"
        return [Row(CHECK, Status.FAIL, support.reason, (fix,))]
    return [Row(CHECK, Status.OK, f"{support.runtime} applies CDI devices")]
