"""The one table of settings: for each, its file key, flag, ``KAE_DP_*`` variable, rule and help.

Everything else is derived from this table and from the defaults of
:class:`~kae_deviceplugin.config.settings.Settings`: the keys the file accepts, the options of
``serve`` with their help and defaults, the environment variables, which settings a reload
cannot apply, and the reference table in ``docs/configuration.md`` (``config.reference``; a
test proves the doc is current). Adding a setting is a field in ``Settings`` and a row here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kae_deviceplugin.config import rules
from kae_deviceplugin.config.engine_fields import ENABLE_ENGINES_FLAG, ENGINE_FIELDS
from kae_deviceplugin.config.kinds import RELOAD_TEXT, Kind, Reload, show_value
from kae_deviceplugin.config.settings import (
    LOG_FORMATS,
    LOG_LEVELS,
    MODES,
    REGISTRATIONS,
    UNHEALTHY_TAINTS,
    Settings,
)
from kae_deviceplugin.core.placement import POLICIES

# Kind, Reload, RELOAD_TEXT and show_value live in kinds.py, re-exported here.
# fmt: off
__all__ = ["ENABLE_ENGINES_FLAG", "ENGINE_FIELDS", "ENV_PREFIX", "OPTIONS", "OPTIONS_BY_FIELD",
           "RELOAD_TEXT", "Kind", "Option", "Reload", "default_of", "restart_only", "show_value"]
# fmt: on

ENV_PREFIX: Final = "KAE_DP_"


@dataclass(frozen=True, slots=True)
class Option:
    """One setting: where it lives in ``Settings`` and how each source spells it."""

    field: str  # attribute of Settings, or "env.<attribute of EnvSettings>"
    key: str  # the file key path: scanInterval, log.level, env.uadkNumaHint
    rule: rules.Rule
    kind: Kind
    help: str
    reload: Reload
    choices: tuple[str, ...] = ()
    derived_default: str | None = None  # how to show a default that follows another setting

    @property
    def name(self) -> str:
        """The last part of the field: the flag and variable names are made from it."""
        return self.field.rpartition(".")[2]

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def section(self) -> str:
        """The file section the key sits in ("" for the top level)."""
        return self.key.rpartition(".")[0]

    @property
    def file_key(self) -> str:
        return self.key.rpartition(".")[2]

    def default_text(self) -> str:
        """The default as a user writes it."""
        if self.derived_default is not None:
            return self.derived_default
        return show_value(default_of(self.field), self.kind)


def _option(
    field: str,
    key: str,
    kind: Kind,
    help: str,
    reload: Reload,
    *,
    rule: rules.Rule | None = None,
    **extra: str | tuple[str, ...],
) -> Option:
    rule = rule or {
        "duration": rules.scan_interval,
        "boolean": rules.boolean,
        "address": rules.metrics_address,
        "path": rules.path,
        "optional-path": rules.optional(rules.path),
        "optional-name": rules.optional(rules.node_name),
        "engine-list": rules.engine_list,
    }.get(kind)
    choices = extra.get("choices", ())
    assert isinstance(choices, tuple)
    if kind == "choice":
        rule = rules.choice(choices)
    assert rule is not None, kind
    derived = extra.get("derived_default")
    assert derived is None or isinstance(derived, str)
    return Option(field, key, rule, kind, help, reload, choices, derived)


OPTIONS: Final[tuple[Option, ...]] = (
    _option("sysfs_root", "paths.sysfsRoot", "path", "Root of the sysfs tree to scan.", "restart"),
    _option("dev_root", "paths.devRoot", "path", "Directory of the uacce device nodes.", "restart"),
    _option("kubelet_root", "paths.kubeletRoot", "path", "The kubelet's --root-dir.", "restart"),
    _option(
        "device_plugin_dir",
        "paths.devicePluginDir",
        "optional-path",
        "The kubelet's device-plugin directory (kubelet.sock and our sockets).",
        "restart",
        derived_default="<kubelet-root>/device-plugins",
    ),
    _option(
        "pod_resources_socket",
        "paths.podResourcesSocket",
        "optional-path",
        "The kubelet's pod-resources socket (who holds which device).",
        "restart",
        derived_default="<kubelet-root>/pod-resources/kubelet.sock",
    ),
    _option(
        "state_dir",
        "paths.stateDir",
        "path",
        "Node-wide files that Allocate answers point at (the container sysfs view).",
        "restart",
    ),
    _option(
        "nfd_features_file",
        "paths.nfdFeaturesFile",
        "optional-path",
        "The node-feature-discovery local feature file; empty turns it off.",
        "restart",
    ),
    _option("cdi_dir", "paths.cdiDir", "path", "Where the CDI spec is written.", "restart"),
    _option(
        "host_sysfs_root",
        "paths.hostSysfsRoot",
        "optional-path",
        "The host's own path of --sysfs-root, named in Allocate answers; set it only where the "
        "daemon sees the host's sysfs under another prefix.",
        "restart",
        derived_default="<sysfs-root>",
    ),
    _option(
        "host_dev_root",
        "paths.hostDevRoot",
        "optional-path",
        "The host's own path of --dev-root, named in Allocate answers and the CDI spec; set it "
        "only where the daemon sees the host's /dev under another prefix.",
        "restart",
        derived_default="<dev-root>",
    ),
    _option(
        "vf_writer_dir",
        "paths.vfWriterDir",
        "optional-path",
        "A directory shared with the vf-writer container, which alone writes sriov_numvfs for "
        "the VF profiles (the chart sets it); empty: the daemon writes it itself.",
        "restart",
    ),
    _option(
        "scan_interval",
        "scanInterval",
        "duration",
        "How often sysfs is rescanned: seconds or a duration such as 500ms (above 0, at most 1h).",
        "applied",
    ),
    _option(
        "mode",
        "mode",
        "choice",
        "Which front end manages the devices: device-plugin (kubelet resources) or dra "
        "(ResourceSlices and claims); one per node, never both.",
        "restart",
        choices=MODES,
    ),
    _option(
        "node_name",
        "dra.nodeName",
        "optional-name",
        "DRA: this node's name, for its ResourceSlices; empty takes $NODE_NAME.",
        "restart",
        derived_default="$NODE_NAME",
    ),
    _option(
        "kubeconfig",
        "dra.kubeconfig",
        "optional-path",
        "DRA: a kubeconfig file for the API server; empty uses the pod's service account.",
        "restart",
        derived_default="in-cluster",
    ),
    _option(
        "runtime_config",
        "dra.runtimeConfig",
        "optional-path",
        "The container runtime's config file, read (DRA, and cdi on) to tell whether it "
        "applies CDI devices (containerd 1.7's enable_cdi, iSulad's enable-cdi); empty "
        "reads the runtime's default path.",
        "restart",
        derived_default="the runtime's own",
    ),
    _option(
        "unhealthy_taint_effect",
        "dra.unhealthyTaintEffect",
        "choice",
        "DRA: the effect of the kae.openfuyao.com/unhealthy taint an unhealthy device keeps in its "
        "slice (NoExecute evicts pods whose claims do not tolerate it); omit leaves the device "
        "out of the slice instead.",
        "restart",
        choices=UNHEALTHY_TAINTS,
    ),
    _option(
        "shared_engines",
        "dra.sharedEngines",
        "engine-list",
        "DRA: engines whose devices several claims share, each asking a number of queues "
        "(consumable capacity; the kernel does not enforce the split); empty shares none.",
        "restart",
    ),
    _option(
        "registration",
        "registration",
        "choice",
        "How to register: Register on kubelet.sock, a socket in plugins_registry, or auto.",
        "restart",
        choices=REGISTRATIONS,
    ),
    _option(
        "metrics_address",
        "metricsAddress",
        "address",
        "HOST:PORT of /metrics, /healthz, /readyz and /allocations; empty turns it off.",
        "restart",
    ),
    _option(
        "allocation_policy",
        "allocationPolicy",
        "choice",
        "Preferred allocation: balanced spreads over NUMA nodes and PFs, packed fills one first.",
        "republished",
        choices=tuple(POLICIES),
    ),
    _option(
        "container_sysfs_view",
        "containerSysfsView",
        "boolean",
        "Give each container a /sys/class/uacce in which only its own devices resolve.",
        "republished",
    ),
    _option(
        "cdi", "cdi", "boolean", "Also name the devices as CDI devices in Allocate.", "republished"
    ),
    _option("log_level", "log.level", "choice", "Log level.", "applied", choices=LOG_LEVELS),
    _option(
        "log_format",
        "log.format",
        "choice",
        "text for people, json for one object per line.",
        "applied",
        choices=LOG_FORMATS,
    ),
    _option(
        "env.uadk_numa_hint",
        "env.uadkNumaHint",
        "boolean",
        "Set UADK's WD_*_CTX_NUM variables for the allocated devices' NUMA node in containers.",
        "republished",
    ),
    _option(
        "env.openssl_engines",
        "env.opensslEngines",
        "optional-path",
        "OPENSSL_ENGINES in containers (the KAE engine's directory); empty leaves it unset.",
        "republished",
        rule=rules.optional(rules.path_text),  # an environment value: kept as text
    ),
)
OPTIONS_BY_FIELD: Final = {option.field: option for option in OPTIONS}


def default_of(field: str) -> object:
    """The default of a field path such as ``scan_interval`` or ``env.uadk_numa_hint``."""
    value: object = Settings()
    for part in field.split("."):
        value = getattr(value, part)
    return value


def restart_only() -> tuple[str, ...]:
    """Fields a reload cannot apply to a running daemon."""
    return tuple(option.field for option in OPTIONS if option.reload == "restart")
