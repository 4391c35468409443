"""`kae-deviceplugin doctor`: why a node shows fewer KAE devices than expected, check by check.

The checks follow the path from hardware to a pod: the engines on the PCI bus and their drivers
(:mod:`kae_deviceplugin.cli.hardware`, with an absent engine's likely cause), the uacce class, each
device's health (with the fix for each reason), SVA, CMA and the drivers' provenance
(:mod:`kae_deviceplugin.cli.doctor_facts`), ``/dev`` nodes, the kubelet's directories and sockets,
a daemon running and registered (its ``/readyz``), the NFD feature file. Each check is a function
of the paths it reads and returns rows; only the daemon check talks to a process, with a short
timeout. A ``fail`` row is something that keeps devices from pods (exit 1). In DRA mode the device
plugin's socket checks give way to the driver's (:mod:`kae_deviceplugin.cli.doctor_dra`), imported
then only, so that device-plugin mode loads neither the DRA modules nor an API client.
"""

from __future__ import annotations

import json
import os
import stat
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from kae_deviceplugin.cli.allocations import endpoint_url
from kae_deviceplugin.cli.checks import Row, Status
from kae_deviceplugin.cli.doctor_facts import check_node_facts
from kae_deviceplugin.cli.doctor_mode import check_mode
from kae_deviceplugin.cli.doctor_vfs import check_vf_profiles, claims_for
from kae_deviceplugin.cli.hardware import check_hardware
from kae_deviceplugin.config.settings import Mode
from kae_deviceplugin.container.runtime_cdi import config_paths, from_configs
from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.health import DEV_NODE_MISSING, REASON_FIXES
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.core.views import VfProfile
from kae_deviceplugin.deviceplugin.servicer import is_our_socket

if TYPE_CHECKING:
    from kae_deviceplugin.apiserver.seam import ApiServer
from kae_deviceplugin.discovery.node_facts import proc_root_for, read_node_facts
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.observability import nfd

HTTP_TIMEOUT = 1.0


@dataclass(frozen=True, slots=True)
class Targets:
    """Where to look; an empty metrics address or no features file skips that check."""

    sysfs_root: Path
    dev_root: Path
    kubelet_root: Path
    metrics_address: str
    nfd_features_file: Path | None
    mode: Mode = "device-plugin"
    node_name: str | None = None  # DRA: whose ResourceSlices to read
    kubeconfig: Path | None = None  # DRA: None is the pod's service account
    cdi_dir: Path = Path("/var/run/cdi")
    runtime_config: Path | None = None  # the runtime's config file; None: its own path
    cdi: bool = False  # device plugin: devices named as CDI devices in Allocate
    state_dir: Path = Path("/var/lib/kae-deviceplugin")  # mode auto: the choice recorded there
    # The VF profiles (engines.<name>.vfs) and who to ask who holds a VF.
    vf_profiles: Mapping[str, VfProfile] = field(default_factory=dict)
    pod_resources_socket: Path | None = None  # None: <kubelet_root>/pod-resources/kubelet.sock


def check_uacce_class(sysfs_root: Path, inventory: Inventory, hardware: bool) -> list[Row]:
    """The class directory the drivers register their devices in, and what it holds."""
    class_dir = sysfs_root / "class" / "uacce"
    if not hardware:
        return [Row("uacce class", Status.SKIP, "no KAE hardware: no uacce device to expect")]
    if not class_dir.is_dir():
        fix = "see the engine rows above: they name each function and its driver"
        return [Row("uacce class", Status.FAIL, f"{class_dir} does not exist", (fix,))]
    rows = [Row("uacce class", Status.WARN, warning) for warning in inventory.warnings]
    if not inventory.devices:
        fix = "see the engine rows above: they name each function and its driver"
        rows.append(Row("uacce class", Status.FAIL, f"no KAE device in {class_dir}", (fix,)))
    else:
        counts = ", ".join(
            f"{e.name} {sum(d.engine == e.name for d in inventory)}" for e in ENGINES
        )
        rows.insert(0, Row("uacce class", Status.OK, f"{len(inventory)} KAE devices ({counts})"))
    return rows


def check_devices(inventory: Inventory) -> list[Row]:
    """One row per device: Healthy, or Unhealthy with each reason and its fix."""
    rows = []
    for d in inventory:
        numa = "unknown" if d.numa_node is None else str(d.numa_node)
        driver = f"{d.driver} {d.driver_version or 'unknown'}" if d.driver else "no driver"
        where = f"{d.engine} {d.function.value.upper()} {d.pci_address}, NUMA {numa}, {driver}"
        if d.healthy:
            rows.append(Row(f"device {d.name}", Status.OK, f"{where}: Healthy"))
            continue
        fixes = tuple(f"{reason}: {REASON_FIXES[reason]}" for reason in d.reasons)
        detail = f"{where}: Unhealthy ({', '.join(d.reasons)})"
        rows.append(Row(f"device {d.name}", Status.FAIL, detail, fixes))
    return rows


def check_dev_nodes(dev_root: Path, inventory: Inventory) -> list[Row]:
    """The device nodes the kubelet hands to containers."""
    if not dev_root.is_dir():
        fix = "--dev-root must name the host's /dev (the chart mounts it at /host/dev)"
        return [Row("/dev nodes", Status.FAIL, f"{dev_root} is not a directory", (fix,))]
    if not inventory.devices:
        return [Row("/dev nodes", Status.SKIP, "no devices to look for")]
    missing = [d.name for d in inventory if not d.dev_node_exists]
    if missing:
        detail = f"missing in {dev_root}: {', '.join(missing)}"
        return [Row("/dev nodes", Status.FAIL, detail, (REASON_FIXES[DEV_NODE_MISSING],))]
    return [Row("/dev nodes", Status.OK, f"all {len(inventory)} present in {dev_root}")]


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def check_kubelet(kubelet_root: Path) -> list[Row]:
    """The kubelet's device-plugin directory and socket, the plugin watcher, pod-resources."""
    plugins = kubelet_root / "device-plugins"
    root_fix = "--kubelet-root must name the kubelet's root (k0s: /var/lib/k0s/kubelet)"
    if not plugins.is_dir():
        return [Row("kubelet", Status.FAIL, f"{plugins} does not exist", (root_fix,))]
    rows = []
    if _is_socket(plugins / "kubelet.sock"):
        rows.append(Row("kubelet", Status.OK, f"{plugins}/kubelet.sock is a socket"))
    else:
        fix = "is the kubelet running, with the device-plugin feature and this root directory?"
        rows.append(Row("kubelet", Status.FAIL, f"no socket {plugins}/kubelet.sock", (fix,)))
    registry = kubelet_root / "plugins_registry"
    # kae-<engine>.sock, or kae<digest>.sock where the directory is too long for that
    found = (p.name for d in (plugins, registry) for p in d.glob("kae*"))
    ours = sorted(name for name in found if is_our_socket(name))
    if ours:
        rows.append(Row("plugin sockets", Status.OK, ", ".join(ours)))
    else:
        fix = "no daemon serves on this node: see the daemon check below and the DaemonSet"
        rows.append(Row("plugin sockets", Status.WARN, "no kae*.sock", (fix,)))
    watcher = "present (auto registration uses it)" if registry.is_dir() else "absent"
    rows.append(Row("plugin watcher", Status.OK, f"{registry} {watcher}"))
    pod_resources = kubelet_root / "pod-resources" / "kubelet.sock"
    if not _is_socket(pod_resources):
        fix = "metrics and /allocations carry no pod names without it (the chart mounts it)"
        rows.append(Row("pod-resources", Status.WARN, f"no socket {pod_resources}", (fix,)))
    return rows


def _fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


def check_daemon(metrics_address: str) -> list[Row]:
    """A daemon's /readyz (registered and streamed from, or in DRA mode registered and its
    slices published) and what the kubelet registered: resources, or the DRA driver's name."""
    if not metrics_address:
        return [Row("daemon", Status.SKIP, "no --metrics-address to ask")]
    try:
        base = endpoint_url(metrics_address)
    except ValueError as err:
        return [Row("daemon", Status.FAIL, f"--metrics-address {err}")]
    try:
        status, body = _fetch(f"{base}/readyz")
    except (OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        fix = "start it (the chart's DaemonSet), or pass --metrics-address where it listens"
        return [Row("daemon", Status.FAIL, f"nothing answers at {base}: {reason}", (fix,))]
    registered = f"; registered: {_registered(base)}"
    if status == 200:
        return [Row("daemon", Status.OK, f"ready at {base}{registered}")]
    fix = "the kubelet has not registered it or streams from it: see the kubelet check and its log"
    detail = f"not ready at {base} (HTTP {status}: {body.strip()}){registered}"
    return [Row("daemon", Status.FAIL, detail, (fix,))]


def _registered(base: str) -> str:
    try:
        _status, text = _fetch(f"{base}/metrics")
        families = text_string_to_metric_families(text)
        samples = [s for f in families if f.name == "kae_resource_registered" for s in f.samples]
    except (OSError, ValueError):
        return "unknown"
    names = [s.labels["resource"] for s in samples if s.value == 1]
    return ", ".join(sorted(names)) or "none"


def check_nfd(features_file: Path | None, now: datetime) -> list[Row]:
    """The NFD local feature file the daemon keeps: present, and not expired."""
    if features_file is None:
        return [Row("nfd feature file", Status.SKIP, "no --nfd-features-file to look at")]
    try:
        labels, expires = nfd.parse(features_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        fix = "the daemon writes it (--nfd-features-file); is NFD's features.d mounted?"
        detail = f"cannot read {features_file}: {getattr(err, 'strerror', None) or err}"
        return [Row("nfd feature file", Status.WARN, detail, (fix,))]
    if expires is not None and expires <= now:
        fix = "the daemon renews it hourly: is it still running on this node?"
        detail = f"{features_file} expired at {expires.isoformat()}"
        return [Row("nfd feature file", Status.WARN, detail, (fix,))]
    return [Row("nfd feature file", Status.OK, f"{features_file}: {len(labels)} labels")]


def run_checks(
    targets: Targets, connect: Callable[[Path | None], ApiServer] | None = None
) -> list[Row]:
    """Every check in order; ``connect`` makes the API client in DRA mode (None: the real one)."""
    inventory = scan(targets.sysfs_root, targets.dev_root) if targets.sysfs_root.is_dir() else None
    if inventory is None:
        fix = "--sysfs-root must name the node's /sys"
        rows = [Row("sysfs", Status.FAIL, f"{targets.sysfs_root} is not a directory", (fix,))]
        inventory = Inventory()
        facts = None
    else:
        facts = read_node_facts(targets.sysfs_root, inventory)
        rows, hardware = check_hardware(targets.sysfs_root, inventory, facts.absent)
        rows += check_uacce_class(targets.sysfs_root, inventory, hardware)
    rows += check_devices(inventory)
    if facts is not None:
        rows += check_node_facts(facts, inventory, proc_root_for(targets.sysfs_root))
    rows += check_dev_nodes(targets.dev_root, inventory)
    mode_rows, mode = check_mode(targets.mode, targets.state_dir)
    rows = mode_rows + rows
    dra = mode == "dra"
    rows += check_dra(targets, inventory, connect) if dra else check_kubelet(targets.kubelet_root)
    if targets.cdi and not dra:
        rows += check_configured_cdi(targets.runtime_config)
    rows += check_daemon(targets.metrics_address)
    rows += check_nfd(targets.nfd_features_file, datetime.now(UTC))
    socket = targets.pod_resources_socket or targets.kubelet_root / "pod-resources/kubelet.sock"
    claims = claims_for(targets.mode, targets.kubelet_root) if targets.vf_profiles else None
    rows += check_vf_profiles(targets.sysfs_root, inventory, targets.vf_profiles, socket, claims)
    return rows


def check_configured_cdi(runtime_config: Path | None) -> list[Row]:
    """Device plugin with ``cdi`` on: does the runtime's config file let CDI names work? Where
    it says CDI is off the daemon names device nodes instead: a WARN, nothing blocks."""
    support = from_configs(*config_paths(runtime_config))
    if support.applies is None:
        detail = f"{support.runtime}'s config does not say whether it applies CDI devices"
        return [Row("runtime cdi", Status.SKIP, detail)]
    if support.refused:
        detail = f"{support.reason}: Allocate names device nodes and mounts instead"
        fix = "turn the runtime's CDI switch on and restart the daemon, or set cdi off"
        return [Row("runtime cdi", Status.WARN, detail, (fix,))]
    return [Row("runtime cdi", Status.OK, f"{support.runtime} applies CDI devices")]


def check_dra(
    targets: Targets, inventory: Inventory, connect: Callable[[Path | None], ApiServer] | None
) -> list[Row]:
    from kae_deviceplugin.cli import doctor_dra  # noqa: PLC0415 -- DRA mode only (see above)

    where = doctor_dra.DraTargets(
        targets.sysfs_root,
        targets.kubelet_root,
        targets.cdi_dir,
        targets.node_name,
        targets.kubeconfig,
        targets.runtime_config,
    )
    return doctor_dra.check_dra(where, inventory, connect)


def blocking(rows: Sequence[Row]) -> bool:
    return any(row.status is Status.FAIL for row in rows)


def render_json(rows: Sequence[Row]) -> str:
    records = [
        {**asdict(row), "status": row.status.value, "fixes": list(row.fixes)} for row in rows
    ]
    return json.dumps({"ok": not blocking(rows), "checks": records}, indent=2)


def render_table(rows: Sequence[Row]) -> str:
    width = max(len(row.check) for row in rows)
    lines = []
    for row in rows:
        lines.append(f"{row.status.value.upper():<5} {row.check:<{width}}  {row.detail}")
        lines += [f"{'':<5} {'':<{width}}  fix: {fix}" for fix in row.fixes]
    failed = sum(row.status is Status.FAIL for row in rows)
    lines.append(f"{failed} problem(s) keep devices from pods" if failed else "nothing blocks")
    return "\n".join(lines)
