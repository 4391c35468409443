"""The chart's value rules, made from the settings table: one source for the daemon and the chart.

The Helm chart writes some of its values into the daemon's config file unchanged
(``config.scanInterval`` becomes ``scanInterval``). For those values the chart must refuse what the
daemon refuses and accept what it accepts, so their rules are generated here from each row's kind
and from the spellings in :mod:`kae_deviceplugin.config.rules` (``scripts/render-chart-schema.py``
writes them; a test proves the checked-in files current).

The work is split in two. ``values.schema.json`` gets each value's type and description (an
editor shows them, and a wrong type fails there). Spelling and range are judged by a generated
template (:mod:`scripts.chart_tooling.chart_checks`), because Helm's schema errors quote the
raw pattern (``does not match pattern '(?i)^\\s*(debug|...)'``), where the template says what the
daemon says (``must be one of debug, info, warning, error``); it also adds up a duration such as
``59m61s``, which JSON Schema cannot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from kae_deviceplugin.config.schema import OPTIONS, OPTIONS_BY_FIELD, Kind
from kae_deviceplugin.core.engines import ENGINES, MAX_VFS
from kae_deviceplugin.core.ids import MAX_SHARES
from kae_deviceplugin.core.views import FUNCTIONS

Node = dict[str, Any]

# Chart value -> the settings row whose rule judges it (the daemon reads the value as written).
CHART_VALUES: Final[Mapping[str, str]] = {
    "kubeletRootDir": "kubelet_root",
    "cdi.specDir": "cdi_dir",
    "config.registration": "registration",
    "config.scanInterval": "scan_interval",
    "config.allocationPolicy": "allocation_policy",
    "config.containerSysfsView": "container_sysfs_view",
    "config.stateDir": "state_dir",
    "config.env.uadkNumaHint": "env.uadk_numa_hint",
    "config.env.opensslEngines": "env.openssl_engines",
    "config.env.opensslConf": "env.openssl_conf",
    "config.log.level": "log_level",
    "config.log.format": "log_format",
    "config.dra.unhealthyTaintEffect": "unhealthy_taint_effect",
    "config.dra.sharedEngines": "shared_engines",
    "config.dra.runtimeConfig": "runtime_config",
    "config.mode": "mode",
    "config.autoPrefer": "auto_prefer",
}
# Chart values that may also be empty, meaning "not set here": config.mode follows dra.enabled.
OPTIONAL_VALUES: Final = frozenset({"config.mode"})
# Chart-only limits on top of the daemon's rule, each with its reason: the chart mounts these
# directories from the host read-write, and the host's / is never one to hand over.
CHART_ONLY: Final[Mapping[str, str]] = {
    "kubeletRootDir": "must not be / (the chart mounts it from the host read-write)",
    "config.stateDir": "must not be / (the chart mounts it from the host read-write)",
}
# A configuration's name names its DaemonSet (<fullname>-<name>, at most 63 characters) and is a
# node label's value: a DNS label, short enough to leave room for the release's name.
CONFIG_NAME_PATTERN: Final = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
CONFIG_NAME_MAX: Final = 30


def kind_node(kind: Kind) -> Node:
    """The JSON Schema type of a value of ``kind``: the types its rule in ``rules`` accepts (its
    spelling and range are the generated template's, see the module's docstring)."""
    types: dict[Kind, Node] = {
        "duration": {"type": ["number", "string"]},
        "boolean": {"type": ["boolean", "string"]},  # text: refused by the check, with why
        "choice": {"type": "string"},
        "path": {"type": "string"},
        "optional-path": {"type": ["string", "null"]},
        "count": {"type": ["integer", "string"]},
        "engine-list": {"type": ["string", "array"], "items": {"type": "string"}},
        "vf-count": {"type": ["integer", "string", "null"]},
    }
    return dict(types[kind])


def generated_nodes() -> dict[str, Node]:
    """Chart value path -> its schema node, for every value the daemon reads as written."""
    nodes: dict[str, Node] = {}
    for key, field in CHART_VALUES.items():
        option = OPTIONS_BY_FIELD[field]
        node = kind_node(option.kind)
        if option.choices:
            empty = " Empty: not set here." if key in OPTIONAL_VALUES else ""
            node["description"] = (
                f"{option.help} One of: {', '.join(option.choices)} (any case).{empty}"
            )
        else:
            node["description"] = option.help
        nodes[key] = node
    for engine in ENGINES:
        prefix = f"config.engines.{engine.name}"
        nodes[f"{prefix}.shares"] = kind_node("count") | {
            "description": f"Devices advertised per {engine.name} function (1 to {MAX_SHARES})."
        }
        nodes[f"{prefix}.functions"] = kind_node("choice") | {
            "description": "Which PCI functions to advertise. One of: " + ", ".join(FUNCTIONS) + "."
        }
        nodes[f"{prefix}.vfs"] = kind_node("vf-count") | {
            "description": f"VFs each {engine.name} PF should have: 0 to {MAX_VFS}, max "
            "(its sriov_totalvfs), or null to leave the node's VFs as they are."
        }
    return nodes


def misplaced() -> dict[str, str]:
    """Chart value path -> why it is refused and where the setting goes, for the daemon's
    ``dra`` keys written under the chart's ``dra`` (the chart's own DRA switches) instead of
    under ``config.dra`` (the daemon's config file): the README once showed them so."""
    written = {OPTIONS_BY_FIELD[field].key: key for key, field in CHART_VALUES.items()}
    found: dict[str, str] = {}
    for option in OPTIONS:
        if option.section != "dra":
            continue
        chart_key = written.get(option.key)
        if chart_key is not None:
            name = option.file_key
            found[option.key] = (
                f"a setting of the daemon's config file, not of the chart's dra switches: set "
                f"{chart_key} (configs.<name>.dra.{name} for the nodes of one configuration)"
            )
        else:
            found[option.key] = (
                "set by the chart itself (the pod's node from the downward API, the API server "
                "through the pod's service account): remove it"
            )
    return found


def with_generated(schema: Node) -> Node:
    """``schema`` (the chart's values.schema.json) with every generated node put in its place.

    Each parent object (its ``required`` and ``additionalProperties``) stays as written there.
    """
    for key, node in generated_nodes().items():
        parent = schema
        *parents, name = key.split(".")
        for part in parents:
            parent = parent["properties"][part]
        parent["properties"][name] = node
    for key, why in misplaced().items():  # accepted by the schema so the template can explain
        schema["properties"]["dra"]["properties"][key.rpartition(".")[2]] = {
            "description": f"Not a chart value: {why}."
        }
    schema["properties"]["configs"] = {
        "type": "object",
        "description": "Per-node configurations: name -> a part of config, for the nodes "
        "labelled openfuyao.com/kae.config=<name>.",
        "additionalProperties": _without_required(schema["properties"]["config"]),
    }
    return schema


def _without_required(node: Node) -> Node:
    """``node`` where no key is required: a per-node configuration overrides any part of it."""
    copy = {key: value for key, value in node.items() if key != "required"}
    if "properties" in copy:
        copy["properties"] = {
            key: _without_required(value) if isinstance(value, dict) else value
            for key, value in copy["properties"].items()
        }
    return copy


def render_schema(text: str) -> str:
    """The file values.schema.json should hold, given what it holds now."""
    return json.dumps(with_generated(json.loads(text)), indent=2, ensure_ascii=False) + "\n"
