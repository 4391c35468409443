"""The daemon's frozen settings, with their types and defaults.

Closed sets are ``Literal`` types, so the type checker knows every value a choice can take; the
option table in :mod:`kae_deviceplugin.config.schema` takes its choices and defaults from here,
and :mod:`kae_deviceplugin.config.resolve` builds a ``Settings`` from defaults, file and flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal, get_args

from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.placement import PolicyName
from kae_deviceplugin.core.views import EngineSettings

Mode = Literal["device-plugin", "dra", "auto"]
# mode auto's bias: dra where every check passes (the default), or the device plugin everywhere
# while the node still says whether DRA would work (docs/modes.md).
AutoPrefer = Literal["dra", "device-plugin"]
Registration = Literal["auto", "kubelet-socket", "plugin-watcher"]
LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["text", "json"]
# DRA: the effect of the taint an unhealthy device gets in its slice; "omit" leaves the device
# out of the slice instead (the behaviour before taints).
UnhealthyTaint = Literal["NoSchedule", "NoExecute", "None", "omit"]
MODES: tuple[Mode, ...] = get_args(Mode)
FRONT_ENDS: tuple[Mode, ...] = ("device-plugin", "dra")  # what runs; auto picks one at start
AUTO_PREFERENCES: tuple[AutoPrefer, ...] = get_args(AutoPrefer)
REGISTRATIONS: tuple[Registration, ...] = get_args(Registration)
LOG_LEVELS: tuple[LogLevel, ...] = get_args(LogLevel)
LOG_FORMATS: tuple[LogFormat, ...] = get_args(LogFormat)
UNHEALTHY_TAINTS: tuple[UnhealthyTaint, ...] = get_args(UnhealthyTaint)

__all__ = [
    "AUTO_PREFERENCES",
    "FRONT_ENDS",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MODES",
    "REGISTRATIONS",
    "UNHEALTHY_TAINTS",
    "AutoPrefer",
    "EngineSettings",
    "EnvSettings",
    "LogFormat",
    "LogLevel",
    "Mode",
    "Registration",
    "Settings",
    "UnhealthyTaint",
]


@dataclass(frozen=True, slots=True)
class EnvSettings:
    """Environment variables added to containers on Allocate."""

    uadk_numa_hint: bool = False  # set WD_<ALG>_CTX_NUM for the allocated device's NUMA node
    openssl_engines: str | None = None  # value of OPENSSL_ENGINES; None leaves it unset
    openssl_conf: bool = False  # OPENSSL_CONF: the image's config plus the engines' grant switches


def _default_engines() -> Mapping[str, EngineSettings]:
    return MappingProxyType({engine.name: EngineSettings() for engine in ENGINES})


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the daemon needs; the defaults suit a stock kubelet on a KAE host."""

    sysfs_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")
    kubelet_root: Path = Path("/var/lib/kubelet")
    device_plugin_dir: Path | None = None  # None: <kubelet_root>/device-plugins
    pod_resources_socket: Path | None = None  # None: <kubelet_root>/pod-resources/kubelet.sock
    state_dir: Path = Path("/var/lib/kae-deviceplugin")
    nfd_features_file: Path | None = Path("/etc/kubernetes/node-feature-discovery/features.d/kae")
    cdi_dir: Path = Path("/var/run/cdi")
    # Where the host itself has sysfs and the device nodes, for the paths Allocate answers name:
    # None means where the daemon reads them. Set only when the daemon sees the host's
    # directories under another prefix (the chart mounts the host's /dev at /host/dev).
    host_sysfs_root: Path | None = None
    host_dev_root: Path | None = None
    # Where VF profile writes are handed to the vf-writer container (daemon/vf_requests.py);
    # None: the daemon writes sriov_numvfs itself (a host process, a test).
    vf_writer_dir: Path | None = None
    scan_interval: float = 1.0
    # Which front end manages the devices: one per node, never both (the kubelet would hand one
    # device out twice); auto chooses one at start (daemon/mode_choice.py).
    mode: Mode = "device-plugin"
    auto_prefer: AutoPrefer = "dra"  # mode auto: the operator's bias (docs/modes.md)
    node_name: str | None = None  # DRA: the node's name; None takes $NODE_NAME (downward API)
    kubeconfig: Path | None = None  # DRA: a kubeconfig file; None is the pod's service account
    # DRA: the runtime's config file, to tell whether it applies CDI; None: its default path.
    runtime_config: Path | None = None
    # DRA: an unhealthy device stays in its slice with a taint of this effect (issue 21).
    unhealthy_taint_effect: UnhealthyTaint = "NoSchedule"
    # DRA: engines whose devices several claims share, each taking some of their queues.
    shared_engines: frozenset[str] = frozenset()
    registration: Registration = "auto"
    metrics_address: str = ":9410"  # "" disables the metrics endpoint
    log_level: LogLevel = "info"
    log_format: LogFormat = "text"
    allocation_policy: PolicyName = "balanced"
    container_sysfs_view: bool = True
    cdi: bool = False
    engines: Mapping[str, EngineSettings] = field(default_factory=_default_engines)
    env: EnvSettings = field(default_factory=EnvSettings)

    @property
    def effective_device_plugin_dir(self) -> Path:
        return self.device_plugin_dir or self.kubelet_root / "device-plugins"

    @property
    def effective_pod_resources_socket(self) -> Path:
        return self.pod_resources_socket or self.kubelet_root / "pod-resources" / "kubelet.sock"

    def engine(self, name: str) -> EngineSettings:
        """The settings of engine ``name``; defaults for an engine the mapping lacks."""
        return self.engines.get(name) or EngineSettings()
