"""A container as a CDI-applying runtime assembles it, emulated from the CDI specification.

The kubelet hands the runtime fully qualified CDI device names (``vendor/class=name``); the
runtime reads every spec file in its CDI directory, finds each name there (a name it cannot
find fails the container's start), and applies the spec's own ``containerEdits`` once and each
named device's ``containerEdits``: device nodes, bind mounts, environment (a later value of a
name replaces an earlier one). ``uacce_view`` then reads ``/sys/class/uacce`` as a process in
that container would: an entry resolves only where the link's target lies under one of the
container's mounts and exists on the host side.

Written from the CDI specification (cncf-tags/container-device-interface SPEC.md), not from the
driver: it imports nothing of it.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLASS_DIR = "/sys/class/uacce"


class Unresolved(LookupError):
    """A CDI name no spec in the directory defines: the runtime refuses to start the container."""


@dataclass
class Container:
    """What the runtime gave the container."""

    # Keyed by container path: an edit for a path already there replaces it (CDI removes the
    # mount or device node at that path before adding its own).
    device_nodes: dict[str, str] = field(default_factory=dict)  # container path -> host path
    mounts: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)  # -> host, opts
    env: dict[str, str] = field(default_factory=dict)

    def apply(self, edits: Mapping[str, Any]) -> None:
        for node in edits.get("deviceNodes", []):
            self.device_nodes.pop(node["path"], None)  # re-added last, as the runtime does
            self.device_nodes[node["path"]] = node.get("hostPath", node["path"])
        for mount in edits.get("mounts", []):
            self.mounts.pop(mount["containerPath"], None)
            self.mounts[mount["containerPath"]] = (
                mount["hostPath"],
                tuple(mount.get("options", [])),
            )
        for line in edits.get("env", []):
            name, _, value = line.partition("=")
            self.env[name] = value

    def host_path(self, path: str) -> str | None:
        """Where ``path`` in the container is on the host: under the deepest mount holding it."""
        best: tuple[str, str] | None = None
        for target, (host, _options) in self.mounts.items():
            inside = path == target or path.startswith(target.rstrip("/") + "/")
            if inside and (best is None or len(target) > len(best[1])):
                best = (host, target)
        if best is None:
            return None
        return best[0] + path[len(best[1]) :]


def _specs(cdi_dir: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(cdi_dir.iterdir()):
        if path.suffix in (".json", ".yaml") and path.is_file():
            found.append(json.loads(path.read_text()))  # JSON is YAML; ours are JSON
    return found


def run_container(cdi_dir: Path, names: Sequence[str]) -> Container:
    """The container the runtime starts with the CDI devices ``names``; Unresolved if any is
    defined by no spec in ``cdi_dir``."""
    defined: dict[str, tuple[int, Mapping[str, Any]]] = {}
    specs = _specs(cdi_dir)
    for index, spec in enumerate(specs):
        for device in spec.get("devices", []):
            defined[f"{spec['kind']}={device['name']}"] = (index, device)
    missing = [name for name in names if name not in defined]
    if missing:
        raise Unresolved(f"unresolvable CDI devices {', '.join(missing)}")
    container = Container()
    for index in dict.fromkeys(defined[name][0] for name in names):
        container.apply(specs[index].get("containerEdits", {}))
    for name in names:
        container.apply(defined[name][1].get("containerEdits", {}))
    return container


def uacce_view(container: Container) -> dict[str, bool]:
    """Each entry of ``/sys/class/uacce`` in the container, and whether it resolves there (its
    link's target, read in the container's namespace, is under a mount and exists)."""
    directory = container.host_path(CLASS_DIR)
    if directory is None or not os.path.isdir(directory):
        return {}
    view: dict[str, bool] = {}
    for name in sorted(os.listdir(directory)):
        entry = os.path.join(directory, name)
        target = os.readlink(entry) if os.path.islink(entry) else None
        if target is None:
            view[name] = os.path.exists(entry)
            continue
        absolute = posixpath.normpath(posixpath.join(CLASS_DIR, target))
        host = container.host_path(absolute)
        view[name] = host is not None and os.path.exists(host)
    return view
