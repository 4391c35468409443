"""`doctor` in DRA mode: the driver as the kubelet and the scheduler see it.

In place of the device plugin's sockets: the registration socket in ``plugins_registry`` and its
GetInfo answer (the kubelet's own question, within its 1 s), the node's ResourceSlices in the API
(:mod:`kae_deviceplugin.cli.doctor_slices`), the checkpoint of prepared claims and each claim's
CDI spec, and a device plugin left running beside the driver. Everything here only reads: no
directory is created, no stale file removed (the fixes say which to remove). Imported only in
DRA mode: it loads the DRA modules, and the slices check the API client.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from kae_deviceplugin.cli.checks import Row, Status
from kae_deviceplugin.cli.doctor_cdi import check_runtime_cdi
from kae_deviceplugin.cli.doctor_slices import Connect, check_slices
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.deviceplugin.servicer import is_our_socket
from kae_deviceplugin.dra.api import (
    DRIVER,
    PLUGIN_SERVICES,
    PLUGIN_TYPE,
    is_registration_socket,
    may_be_registration_socket,
    plugin_dir,
)
from kae_deviceplugin.dra.cdi_claims import uid_of_spec_file
from kae_deviceplugin.dra.checkpoint import Checkpoint, CheckpointFile
from kae_deviceplugin.errors import CheckpointError, CheckpointTooNew
from kae_deviceplugin.kubelet.pluginwatcher import PluginInfo, query_info, registry_dir

GET_INFO_TIMEOUT = 1.0  # the kubelet's own deadline for GetInfo
ROOT_FIX = "--kubelet-root must name the kubelet's --root-dir (k0s: /var/lib/k0s/kubelet)"


@dataclass(frozen=True, slots=True)
class DraTargets:
    """Where the DRA driver keeps its state, and how to reach the API server."""

    sysfs_root: Path
    kubelet_root: Path
    cdi_dir: Path
    node_name: str | None
    kubeconfig: Path | None
    runtime_config: Path | None = None  # the runtime's config file; None: its own path


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _judge(info: PluginInfo) -> tuple[str, str] | None:
    """What is wrong with a GetInfo answer (detail, fix), or None."""
    restart = "restart the driver (kae-deviceplugin serve --mode dra) on this node"
    if (info.type, info.name) != (PLUGIN_TYPE, DRIVER):
        return f"answers as {info.type} {info.name!r}, not {PLUGIN_TYPE} {DRIVER!r}", (
            "another program serves this socket name: stop it, then " + restart
        )
    if not set(info.supported_versions) & set(PLUGIN_SERVICES):
        versions = ", ".join(info.supported_versions) or "nothing"
        return f"advertises {versions}: none of {', '.join(PLUGIN_SERVICES)}", restart
    if not os.path.isabs(info.endpoint) or not _is_socket(Path(info.endpoint)):
        return f"names its service socket {info.endpoint}, which is not a socket", (
            f"{restart}, with --kubelet-root the kubelet's root as this host sees it"
        )
    return None


def _answers_as_ours(socket: Path) -> bool:
    try:
        return query_info(socket, GET_INFO_TIMEOUT).name == DRIVER
    except ConnectionError:
        return False


def _probe(socket: Path) -> Row:
    check = "dra registration"
    if not _is_socket(socket):
        return Row(check, Status.FAIL, f"{socket} is not a socket", (f"remove {socket}",))
    try:
        info = query_info(socket, GET_INFO_TIMEOUT)
    except ConnectionError as err:
        detail = f"{socket} does not answer GetInfo within {GET_INFO_TIMEOUT:g} s ({err})"
        fix = f"left by a driver that is gone: restart the driver, or remove {socket}"
        return Row(check, Status.FAIL, detail, (fix,))
    wrong = _judge(info)
    if wrong is not None:
        return Row(check, Status.FAIL, f"{socket} {wrong[0]}", (wrong[1],))
    versions = ", ".join(info.supported_versions)
    detail = f"{socket} answers: {info.type} {info.name}, service {info.endpoint} ({versions})"
    return Row(check, Status.OK, detail)


def check_registration(kubelet_root: Path) -> list[Row]:
    """The driver's registration socket(s) in plugins_registry, each asked GetInfo."""
    registry = registry_dir(kubelet_root)
    if not registry.is_dir():
        return [Row("dra registration", Status.FAIL, f"{registry} does not exist", (ROOT_FIX,))]
    sockets = sorted(p for p in registry.iterdir() if is_registration_socket(p.name))
    # Upstream's shortest rolling names are any driver's: ours are those answering as ours.
    sockets += sorted(
        p for p in registry.iterdir() if may_be_registration_socket(p.name) and _answers_as_ours(p)
    )
    if not sockets:
        detail = f"no registration socket of {DRIVER} in {registry}"
        fix = (
            f"start the driver on this node: kae-deviceplugin serve --mode dra --kubelet-root "
            f"{kubelet_root} (it creates {registry / (DRIVER + '-reg.sock')})"
        )
        return [Row("dra registration", Status.FAIL, detail, (fix,))]
    rows = [_probe(socket) for socket in sockets]
    if any(row.status is Status.OK for row in rows):  # one live driver is enough for the kubelet
        rows = [row if row.status is Status.OK else _warned(row) for row in rows]
    return rows


def _warned(row: Row) -> Row:
    return Row(row.check, Status.WARN, row.detail, row.fixes)


# The chart's label that gives a node a per-node configuration, and the name its README uses
# for the configuration in DRA mode: relabelling moves only this node, to that DaemonSet.
CONFIG_LABEL = "openfuyao.com/kae.config"
DRA_CONFIG = "dra"


def one_mode_fix(node: str | None) -> str:
    """How to keep the DRA driver and drop the device plugin on one node. Not the opt-out label
    openfuyao.com/kae.deploy.device-plugin=false: both of the chart's DaemonSets honour it, so
    the driver would leave too."""
    where = node or "<node>"
    return (
        "one mode per node, never both (a device could go to a pod and to a claim at once): "
        f"with the chart, give the node a configuration in DRA mode (helm upgrade ... --set "
        f"configs.{DRA_CONFIG}.mode=dra, then kubectl label node {where} "
        f"{CONFIG_LABEL}={DRA_CONFIG}): its device-plugin pod leaves and a DRA pod serves it; "
        "a device plugin started otherwise: stop it on this node"
    )


def check_one_mode(kubelet_root: Path, node: str | None = None) -> list[Row]:
    """A device plugin's sockets beside the DRA driver: the same devices offered twice."""
    found = sorted(
        str(path)
        for directory in (kubelet_root / "device-plugins", registry_dir(kubelet_root))
        if directory.is_dir()
        for path in directory.glob("kae*")
        if is_our_socket(path.name)
    )
    if not found:
        return [Row("one mode per node", Status.OK, "no device-plugin socket of ours")]
    detail = f"the device plugin runs here too: {', '.join(found)}"
    return [Row("one mode per node", Status.WARN, detail, (one_mode_fix(node),))]


def load_checkpoint(kubelet_root: Path) -> tuple[Row, Checkpoint | None]:
    """The checkpoint's row, and the checkpoint when it could be read."""
    file = CheckpointFile(plugin_dir(kubelet_root))
    try:
        checkpoint = file.read_only()
    except CheckpointTooNew as err:
        fix = "run the kae-deviceplugin version that wrote it"
        return Row("dra checkpoint", Status.FAIL, str(err), (fix,)), None
    except CheckpointError as err:
        fix = (
            f"the driver refuses to start with it: once no pod on this node holds a KAE claim, "
            f"move {file.path} aside and restart the driver"
        )
        return Row("dra checkpoint", Status.FAIL, str(err), (fix,)), None
    except OSError as err:
        detail = f"cannot read {file.path}: {err.strerror or err}"
        fix = "run doctor as root, as the driver runs (the file is 0600)"
        return Row("dra checkpoint", Status.FAIL, detail, (fix,)), None
    count = len(checkpoint.claims)
    detail = f"{file.path}: {count} prepared claim{'s' * (count != 1)}"
    return Row("dra checkpoint", Status.OK, detail), checkpoint


def check_cdi_specs(cdi_dir: Path, checkpoint: Checkpoint) -> list[Row]:
    """Every checkpointed claim's CDI spec is there; claim specs no claim holds are reported."""
    try:
        names = os.listdir(cdi_dir)
    except FileNotFoundError:
        names = []
    except OSError as err:
        return [Row("cdi specs", Status.FAIL, f"cannot list {cdi_dir}: {err.strerror}")]
    rows = []
    restart = "restart the driver: at its start it writes every checkpointed claim's spec again"
    for uid, claim in sorted(checkpoint.claims.items()):
        if claim.cdi_spec not in names:
            detail = (
                f"claim {claim.namespace}/{claim.name} ({uid}): no CDI spec "
                f"{cdi_dir / claim.cdi_spec} (its containers cannot start: the runtime cannot "
                "resolve its CDI devices)"
            )
            rows.append(Row("cdi specs", Status.FAIL, detail, (restart,)))
    orphans = sorted(n for n in names if uid_of_spec_file(n) not in (None, *checkpoint.claims))
    if orphans:
        paths = " ".join(str(cdi_dir / n) for n in orphans)
        detail = f"claim specs of no prepared claim: {paths}"
        fix = f"the driver removes them at its start; with no driver running: rm {paths}"
        rows.append(Row("cdi specs", Status.WARN, detail, (fix,)))
    if not rows:
        count = len(checkpoint.claims)
        rows.append(Row("cdi specs", Status.OK, f"{count} claim specs in {cdi_dir}, none stray"))
    return rows


def check_dra(targets: DraTargets, inventory: Inventory, connect: Connect | None) -> list[Row]:
    """Every DRA-mode check, in the order a claim meets them."""
    rows = check_one_mode(targets.kubelet_root, targets.node_name)
    rows += check_registration(targets.kubelet_root)
    rows += check_slices(
        inventory, targets.sysfs_root, targets.node_name, targets.kubeconfig, connect
    )
    rows += check_runtime_cdi(
        targets.node_name, targets.kubeconfig, targets.runtime_config, connect
    )
    row, checkpoint = load_checkpoint(targets.kubelet_root)
    rows.append(row)
    if checkpoint is not None:
        rows += check_cdi_specs(targets.cdi_dir, checkpoint)
    return rows
