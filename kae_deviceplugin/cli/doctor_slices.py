"""`doctor` in DRA mode, in the API: the node's ResourceSlices as the scheduler reads them.

The scheduler allocates from a pool only when it is complete: every slice at the newest
generation and as many of them as ``resourceSliceCount`` says. Its devices should be the ones
the driver makes from this node's scan (:func:`kae_deviceplugin.dra.slices.build_slices`, the
driver's own function, over doctor's own scan); a device missing is one no claim can get, a
device too many is one a claim can get and then fail to prepare. The API client is created
here, in DRA mode only, through the seam; a test hands in its in-memory server instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

from kae_deviceplugin.apiserver.hints import RBAC_FIX, hint
from kae_deviceplugin.apiserver.seam import NODES, RESOURCE_SLICES, ApiServer, JsonObject
from kae_deviceplugin.cli.checks import Row, Status
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.queues import QueueTotals
from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.slices import NodeRef, build_slices
from kae_deviceplugin.errors import UNREACHABLE, ApiError, KubeconfigError

Connect = Callable[[Path | None], ApiServer]
API_TIMEOUT = 15.0  # two calls of at most 10 s each would be a broken API server anyway
CHECK = "dra slices"
PASS_KUBECONFIG = "outside a pod pass --kubeconfig FILE (KAE_DP_KUBECONFIG)"
NODE_FIX = "--node-name (KAE_DP_NODE_NAME) or NODE_NAME must be the node's name in the API"


def real_connect(kubeconfig: Path | None) -> ApiServer:
    from kae_deviceplugin.apiserver.rest_api import connect  # noqa: PLC0415 -- DRA only

    return connect(kubeconfig)


async def _read(api: ApiServer, node: str) -> tuple[list[JsonObject], bool]:
    """The node's slices of our driver, and whether the node exists (asked only when none)."""
    try:
        async with asyncio.timeout(API_TIMEOUT):
            slices = await api.list(RESOURCE_SLICES, {"spec.driver": DRIVER, "spec.nodeName": node})
            if slices:
                return slices, True
            try:
                await api.get(NODES, node)
            except ApiError as err:
                if err.status != 404:
                    raise
                return [], False
            return [], True
    except TimeoutError:
        server = getattr(api, "server", "") or "the API server"  # the real client knows its URL
        raise ApiError(f"no answer from {server} within {API_TIMEOUT:g} s",
                       reason=UNREACHABLE) from None  # fmt: skip
    finally:
        await api.close()


def _api_error(err: ApiError, kubeconfig: Path | None) -> Row:
    """The row for a refusal or no answer: what happened, and the fix its status tells."""
    if isinstance(err, KubeconfigError):
        named = f"kubeconfig {err}" if kubeconfig is not None else str(err)
        fix = "fix the file, or pass one that works (kubectl --kubeconfig FILE get nodes tries it)"
        if kubeconfig is None:
            fix = PASS_KUBECONFIG
        return Row(CHECK, Status.FAIL, f"no API client: {named}", (fix,))
    if err.status in (401, 403):
        detail = f"the API server refuses (HTTP {err.status} {err.reason}): {err}"
        return Row(CHECK, Status.FAIL, detail, (hint(err) or RBAC_FIX,))
    fixes = [found] if (found := hint(err)) is not None else []
    if err.status == 0 and kubeconfig is None:  # no answer, in a pod or not: which server?
        fixes.append(PASS_KUBECONFIG)
    return Row(CHECK, Status.FAIL, f"cannot read ResourceSlices: {err}", tuple(fixes))


def _pool_rows(node: str, slices: Sequence[JsonObject], expected: set[str]) -> list[Row]:
    """The pool complete at one generation, and its devices those of the local scan."""
    pools = {s["spec"]["pool"]["name"] for s in slices}
    if node not in pools:
        fix = f"our pool is named after the node: restart the driver with {NODE_FIX}"
        return [Row(CHECK, Status.FAIL, f"no pool {node}, only {sorted(pools)}", (fix,))]
    mine = [s for s in slices if s["spec"]["pool"]["name"] == node]
    newest = max(int(s["spec"]["pool"]["generation"]) for s in mine)
    current = [s for s in mine if int(s["spec"]["pool"]["generation"]) == newest]
    rows = []
    stale = sorted(s["metadata"]["name"] for s in mine if s not in current)
    if stale:
        detail = f"pool {node}: slices behind generation {newest}: {', '.join(stale)}"
        fix = "an update under way (ask again in a few seconds), else restart the driver"
        rows.append(Row(CHECK, Status.FAIL, detail, (fix,)))
    counts = {int(s["spec"]["pool"]["resourceSliceCount"]) for s in current}
    if counts != {len(current)}:
        detail = (
            f"pool {node} generation {newest}: {len(current)} slices, resourceSliceCount "
            f"{sorted(counts)} (the scheduler allocates nothing from an incomplete pool)"
        )
        rows.append(Row(CHECK, Status.FAIL, detail, ("restart the driver: it rewrites the pool",)))
    published = {d["name"] for s in current for d in s["spec"].get("devices") or []}
    rows += _device_rows(node, newest, published, expected)
    return rows


def _device_rows(node: str, generation: int, published: set[str], expected: set[str]) -> list[Row]:
    missing, extra = sorted(expected - published), sorted(published - expected)
    rows = []
    if missing:
        detail = f"pool {node}: not published, no claim can get them: {', '.join(missing)}"
        fix = "the driver publishes a change within a scan interval; if this stays, see its log"
        rows.append(Row(CHECK, Status.FAIL, detail, (fix,)))
    if extra:
        detail = f"pool {node}: published but not Healthy on this node now: {', '.join(extra)}"
        fix = "a claim given one fails to prepare: is the driver running, on this --sysfs-root?"
        rows.append(Row(CHECK, Status.FAIL, detail, (fix,)))
    if not rows:
        detail = f"pool {node} generation {generation}: {len(published)} devices, as scanned here"
        rows.append(Row(CHECK, Status.OK, detail))
    return rows


def check_slices(
    inventory: Inventory,
    sysfs_root: Path,
    node: str | None,
    kubeconfig: Path | None,
    connect: Connect | None = None,
) -> list[Row]:
    """The node's pool in the API against what the driver would publish from this scan."""
    if not node:
        fix = "pass --node-name (KAE_DP_NODE_NAME) or set NODE_NAME, as for serve --mode dra"
        return [Row(CHECK, Status.FAIL, "no node name: cannot look for its slices", (fix,))]
    try:
        api = (connect or real_connect)(kubeconfig)
    except ApiError as err:
        return [_api_error(err, kubeconfig)]
    said = _insecure_rows(api)
    try:
        slices, node_known = asyncio.run(_read(api, node))
    except ApiError as err:
        return [*said, _api_error(err, kubeconfig)]
    return said + _slice_rows(inventory, sysfs_root, node, slices, node_known)


def _insecure_rows(api: ApiServer) -> list[Row]:
    """A warning when the kubeconfig turned TLS verification off (the real client says)."""
    target = getattr(api, "target", None)
    if not getattr(target, "insecure", False):
        return []
    detail = f"TLS verification of {getattr(api, 'server', '')} is off (insecure-skip-tls-verify)"
    fix = "give the cluster's certificate-authority in the kubeconfig instead"
    return [Row("api tls", Status.WARN, detail, (fix,))]


def _slice_rows(
    inventory: Inventory,
    sysfs_root: Path,
    node: str,
    slices: list[JsonObject],
    node_known: bool,
) -> list[Row]:
    if not node_known:
        return [Row(CHECK, Status.FAIL, f"no node {node} in the API", (NODE_FIX,))]
    if not slices:
        detail = f"no ResourceSlice of {DRIVER} for node {node}"
        fix = (
            "the driver publishes them once it runs and reaches the API server (the kubelet "
            "deletes them 30 s after the driver's connection ends): see the registration row"
        )
        return [Row(CHECK, Status.FAIL, detail, (fix,))]
    queues = QueueTotals(sysfs_root).update(inventory)
    plan = build_slices(inventory, NodeRef(node, ""), generation=1, queues=queues)
    return _pool_rows(node, slices, set(plan.device_names))
