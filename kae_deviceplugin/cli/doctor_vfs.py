"""`doctor`'s VF profile rows: per PF of an engine with ``engines.<name>.vfs``, whether it has its
VFs, and if not, why not and what to do (the same plan the daemon makes, read fresh)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from kae_deviceplugin.cli.checks import Row, Status
from kae_deviceplugin.config.settings import Mode
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.core.vf_plan import VfChange, plan
from kae_deviceplugin.core.views import VfProfile
from kae_deviceplugin.daemon.vf_holders import ClaimHolders, pod_resources_holders
from kae_deviceplugin.discovery.sriov import read_pfs

CHECK = "VF profile"
_WAITS = "it changes by itself once they are gone; no pod loses its device meanwhile"
_READY = (
    "the daemon changes it on its next pass; if it stays so, its log has the failed write (one "
    "line) and kae_vf_change_pending says why"
)


def check_vf_profiles(
    sysfs_root: Path,
    inventory: Inventory,
    profiles: Mapping[str, VfProfile],
    pod_resources_socket: Path,
    claims: ClaimHolders | None = None,
) -> list[Row]:
    """One row per PF (or per engine refused for lack of one); none without a profile."""
    if not profiles:  # the default: nothing to check, and no row to read past
        return []
    ask = pod_resources_holders(pod_resources_socket, claims)
    holders = asyncio.run(ask(inventory))
    available = {d.pci_address: d.available_instances for d in inventory}
    pfs = read_pfs(str(sysfs_root), inventory)
    changes = plan(profiles, pfs, {d.engine for d in inventory}, available, holders)
    return [_row(change) for change in changes]


def _row(change: VfChange) -> Row:
    if change.state == "done":
        detail = f"{change.setting}: PF {change.pf} has its {change.desired} VFs"
        return Row(CHECK, Status.OK, detail)
    if change.state == "ready":
        detail = (
            f"{change.setting}: PF {change.pf} has {change.present} VFs, the profile "
            f"{change.desired}, and nothing holds them"
        )
        return Row(CHECK, Status.WARN, detail, (_READY,))
    if change.state == "pending":
        return Row(CHECK, Status.WARN, change.why, (_WAITS,))
    return Row(CHECK, Status.WARN, change.why)  # refused: the line names the fix


def claims_for(mode: Mode, kubelet_root: Path) -> ClaimHolders | None:
    """DRA mode's prepared claims (its checkpoint), loaded only in DRA mode."""
    if mode != "dra":
        return None
    from kae_deviceplugin.dra.vf_claims import prepared_claims  # noqa: PLC0415 -- DRA only

    return prepared_claims(kubelet_root)
