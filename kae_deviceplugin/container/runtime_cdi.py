"""Whether the node's container runtime applies CDI devices, which is how DRA hands a
container its devices (pure: the caller reads the files).

A DRA claim reaches its container only as CDI device IDs in the CRI request. A runtime with
CDI off creates the container anyway, without the device nodes, mounts and variables, and logs
nothing above debug level: the pod runs and fails at run time with nothing pointing at the
cause. On KAE nodes that is common: containerd 1.7 has ``enable_cdi = false`` by default (2.0
turned it on, 2.4 removed the switch), containerd before 1.7 has no CDI, and iSulad's CDI is a
build option whose ``enable-cdi`` daemon setting defaults to false. So the driver reads its
Node's ``status.nodeInfo.containerRuntimeVersion`` (``containerd://1.7.35``) and, where the
answer depends on a setting, the runtime's own configuration file; a runtime that does not
apply CDI gets no claim (see the front end), and the reason names the setting to change.

The device plugin's ``cdi: on`` names its devices as CDI devices in Allocate instead of device
nodes and mounts, so the same runtime would start its containers without them. It has no Node
to read (no API access in that mode), so it judges from the runtime's config files alone
(``from_configs``): a containerd config of version 3 (only 2.x reads it) or with
``enable_cdi = true`` applies CDI, an explicit ``enable_cdi = false`` (what containerd 1.7's
``config default`` writes) or an iSulad config without ``enable-cdi`` does not, anything else
cannot be told and the setting is trusted.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CONTAINERD_CONFIG = Path("/etc/containerd/config.toml")
ISULAD_CONFIG = Path("/etc/isulad/daemon.json")
CRI_PLUGIN = "io.containerd.grpc.v1.cri"
_VERSION = re.compile(r"v?(\d+)\.(\d+)")
DEVICE_PLUGIN_HINT = "or run this node in device-plugin mode, which needs no CDI"


@dataclass(frozen=True, slots=True)
class CdiSupport:
    """``applies``: True, False, or None when it cannot be told (then nothing is refused)."""

    applies: bool | None
    runtime: str
    reason: str = ""  # why not, with the fix; empty when it applies

    @property
    def refused(self) -> bool:
        return self.applies is False


def _version(text: str) -> tuple[int, int] | None:
    match = _VERSION.match(text)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def _containerd_document(config: bytes) -> dict[str, Any] | None:
    """A containerd config file's TOML; None for one that is not (containerd would refuse it)."""
    import tomllib  # noqa: PLC0415 -- only where a containerd config is read, once

    try:
        return tomllib.loads(config.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None


def _enable_cdi(document: Mapping[str, Any]) -> object:
    """The CRI plugin's ``enable_cdi`` as written in a containerd 1.7 config; None if absent."""
    cri = document.get("plugins", {}).get(CRI_PLUGIN, {})
    return cri.get("enable_cdi") if isinstance(cri, dict) else None


def _containerd_enables_cdi(config: bytes | None) -> bool:
    """``enable_cdi`` of the CRI plugin in a containerd 1.7 config; absent means false, and so
    does a file containerd itself would not start on (its default is what is said)."""
    document = None if config is None else _containerd_document(config)
    return document is not None and _enable_cdi(document) is True


def _isulad_enables_cdi(config: bytes | None) -> bool:
    if config is None:
        return False
    try:
        document = json.loads(config)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(document, dict) and document.get("enable-cdi") is True


def _containerd(
    runtime: str, version: tuple[int, int], config: bytes | None, path: Path
) -> CdiSupport:
    if version >= (2, 0):
        return CdiSupport(True, runtime)
    if version < (1, 7):
        return CdiSupport(False, runtime, (
            f"{runtime} cannot apply CDI devices (containerd 1.7 is the first that can); "
            f"upgrade it, {DEVICE_PLUGIN_HINT}"
        ))  # fmt: skip
    if _containerd_enables_cdi(config):
        return CdiSupport(True, runtime)
    where = path if config is not None else f"{path} (absent)"
    return CdiSupport(False, runtime, (
        f"{runtime} does not apply CDI devices: set enable_cdi = true under "
        f'[plugins."{CRI_PLUGIN}"] in {where} and restart containerd, {DEVICE_PLUGIN_HINT}'
    ))  # fmt: skip


def _isulad(runtime: str, config: bytes | None, path: Path) -> CdiSupport:
    if _isulad_enables_cdi(config):
        return CdiSupport(True, runtime)
    where = path if config is not None else f"{path} (absent)"
    return CdiSupport(False, runtime, (
        f'{runtime} does not apply CDI devices: set "enable-cdi": true in {where} (iSulad '
        f"built with CDI support) and restart isulad, {DEVICE_PLUGIN_HINT}"
    ))  # fmt: skip


def cdi_support(
    runtime_version: str,
    *,
    containerd_config: bytes | None = None,
    isulad_config: bytes | None = None,
    containerd_path: Path = CONTAINERD_CONFIG,
    isulad_path: Path = ISULAD_CONFIG,
) -> CdiSupport:
    """What the runtime named ``<name>://<version>`` does with CDI devices; a config file
    passed as None is absent on the node (the runtime's default applies)."""
    name, _, version_text = runtime_version.partition("://")
    name = name.lower()
    version = _version(version_text)
    runtime = f"{name} {version_text}".strip()
    if name == "containerd" and version is not None:
        return _containerd(runtime, version, containerd_config, containerd_path)
    if name == "isulad":
        return _isulad(runtime, isulad_config, isulad_path)
    if name == "cri-o":
        return CdiSupport(True, runtime)  # on by default since CRI-O 1.23
    return CdiSupport(None, runtime or "an unknown runtime")


def _containerd_from_config(config: bytes, path: Path) -> CdiSupport:
    document = _containerd_document(config)
    if document is None:
        return CdiSupport(None, "containerd")
    version = document.get("version")
    if isinstance(version, int) and version >= 3:
        return CdiSupport(True, "containerd 2")
    setting = _enable_cdi(document)
    if setting is None:
        return CdiSupport(None, "containerd")
    if setting is True:
        return CdiSupport(True, "containerd")
    return CdiSupport(False, "containerd", (
        f"containerd does not apply CDI devices: enable_cdi = false under "
        f'[plugins."{CRI_PLUGIN}"] in {path}'
    ))  # fmt: skip


def config_paths(chosen: Path | None) -> tuple[Path | None, Path | None]:
    """The containerd and iSulad config files to read: ``chosen`` (``runtime_config``) as the
    one its format says (``.json``: iSulad's), else both runtimes' own."""
    if chosen is None:
        return CONTAINERD_CONFIG, ISULAD_CONFIG
    return (None, chosen) if chosen.suffix == ".json" else (chosen, None)


def from_configs(containerd: Path | None, isulad: Path | None) -> CdiSupport:
    """What the runtime whose config file is present does with CDI devices, judged from that
    file alone (the device plugin's case: no Node to name the runtime and its version)."""
    try:
        containerd_config = None if containerd is None else read_config(containerd)
        isulad_config = None if isulad is None else read_config(isulad)
    except OSError as err:
        log.warning("cannot tell whether the runtime applies CDI devices: %s", err)
        return CdiSupport(None, "the runtime")
    if containerd is not None and containerd_config is not None and isulad_config is None:
        return _containerd_from_config(containerd_config, containerd)
    if isulad is not None and isulad_config is not None and containerd_config is None:
        return _isulad("isulad", isulad_config, isulad)
    return CdiSupport(None, "the runtime")  # neither file, or both: which one runs is unknown


def read_config(path: Path) -> bytes | None:
    """A runtime's config file as the chart mounts it; None when it is absent on the node.
    Raises OSError for one that exists but cannot be read (then nothing can be told)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def runtime_of(node: Mapping[str, Any], containerd: Path, isulad: Path) -> CdiSupport:
    """What the runtime of the Node object ``node`` does with CDI devices, its config read from
    the paths given (as the chart mounts them); not known when a file cannot be read."""
    version = str(node.get("status", {}).get("nodeInfo", {}).get("containerRuntimeVersion", ""))
    try:
        return cdi_support(
            version,
            containerd_config=read_config(containerd),
            isulad_config=read_config(isulad),
            containerd_path=containerd,
            isulad_path=isulad,
        )
    except OSError as err:
        log.warning("cannot tell whether %s applies CDI devices: %s", version, err)
        return CdiSupport(None, version)
