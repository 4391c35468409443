"""The one table of settings: for each, its file key, flag, ``KAE_DP_*`` variable, rule and help.

Everything else is derived from this table and from the defaults of
:class:`~kae_deviceplugin.config.settings.Settings`: the keys the file accepts, the options of
``serve`` with their help and defaults, the environment variables, which settings a reload
cannot apply, and the reference table in ``docs/configuration.md`` (``config.reference``; a
test proves the doc is current). Adding a setting is a field in ``Settings`` and a row here.
"""

from __future__ import annotations

from typing import Final

from kae_deviceplugin.config import rules
from kae_deviceplugin.config.engine_fields import ENABLE_ENGINES_FLAG, ENGINE_FIELDS
from kae_deviceplugin.config.kinds import RELOAD_TEXT, Kind, Reload, show_value
from kae_deviceplugin.config.option import ENV_PREFIX, Option, default_of
from kae_deviceplugin.config.option import option as _option
from kae_deviceplugin.config.settings import (
    AUTO_PREFERENCES,
    LOG_FORMATS,
    LOG_LEVELS,
    MODES,
    REGISTRATIONS,
    UNHEALTHY_TAINTS,
)
from kae_deviceplugin.core.placement import POLICIES

# Kind, Reload, RELOAD_TEXT and show_value live in kinds.py, Option, ENV_PREFIX and default_of
# in option.py, re-exported here.
# fmt: off
__all__ = ["ENABLE_ENGINES_FLAG", "ENGINE_FIELDS", "ENV_PREFIX", "OPTIONS", "OPTIONS_BY_FIELD",
           "RELOAD_TEXT", "Kind", "Option", "Reload", "default_of", "restart_only", "show_value"]
# fmt: on

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
        "Which front end manages the devices: device-plugin (kubelet resources), dra "
        "(ResourceSlices and claims), or auto (chosen at start from what the node and the "
        "API server support, docs/modes.md); one per node, never both.",
        "restart",
        choices=MODES,
    ),
    _option(
        "auto_prefer",
        "autoPrefer",
        "choice",
        "mode auto: dra where every check passes, or device-plugin everywhere (the node "
        "still says whether DRA would work).",
        "restart",
        choices=AUTO_PREFERENCES,
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
    _option(
        "env.openssl_conf",
        "env.opensslConf",
        "boolean",
        "Set OPENSSL_CONF in containers to a file that includes the image's own OpenSSL "
        "configuration and turns on the KAE engines' UADK_CMD_ENABLE_<ALG>_ENV, so that they "
        "size their queues by WD_<ALG>_CTX_NUM (the grant); engines the image lacks are skipped.",
        "republished",
    ),
)
OPTIONS_BY_FIELD: Final = {option.field: option for option in OPTIONS}


def restart_only() -> tuple[str, ...]:
    """Fields a reload cannot apply to a running daemon."""
    return tuple(option.field for option in OPTIONS if option.reload == "restart")
