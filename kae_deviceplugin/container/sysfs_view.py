"""The container's view of /sys/class/uacce: a node-wide directory of links, kept current.

Why this shape (the README has the diagram):

* sysfs is not namespaced, so without help a container lists every engine on the node and UADK may
  pick one whose /dev node the container was never given.
* The kubelet merges the Allocate answers of a container's resources first-wins per mount path and
  tells the plugin nothing about the pod, so one resource cannot know what another resource gave the
  same container. Every answer therefore mounts the *same* node-wide directory over
  /sys/class/uacce, and the merge is harmless.
* That directory holds one link per device on the node:
  ``<name> -> /run/kae/pci/<bdf>/uacce/<name>``.
  Each answer also bind-mounts the PCI function directory of each device it gives at
  ``/run/kae/pci/<bdf>``. In a container, only the links of its own devices resolve; UADK skips an
  entry whose ``algorithms`` it cannot read, so it only ever uses devices it was given.
* The kernel's ``device`` link inside a class device is ``../../../<bdf>``; mounted at
  ``/run/kae/pci/<bdf>``, it resolves to the mount itself, so ``device/numa_node`` reads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

from kae_deviceplugin.core.model import UacceDevice

log = logging.getLogger(__name__)

CONTAINER_CLASS_DIR = "/sys/class/uacce"
CONTAINER_PCI_BASE = "/run/kae/pci"
VIEW_DIR_NAME = "uacce-class"


def view_dir(state_dir: Path) -> Path:
    return state_dir / VIEW_DIR_NAME


def container_pci_dir(device: UacceDevice) -> str:
    return f"{CONTAINER_PCI_BASE}/{device.pci_address}"


def link_target(device: UacceDevice) -> str:
    return f"{container_pci_dir(device)}/uacce/{device.name}"


def sync_view(state_dir: Path, devices: Iterable[UacceDevice]) -> bool:
    """Make the view directory hold exactly one correct link per device; True if anything changed.

    Entries are replaced one by one with rename(), never by swapping the directory: running
    containers bind-mounted this very directory and must see the update.
    """
    directory = view_dir(state_dir)
    directory.mkdir(parents=True, exist_ok=True)
    wanted = {device.name: link_target(device) for device in devices}
    changed = False
    for entry in os.listdir(directory):
        path = directory / entry
        if entry not in wanted or not _is_link_to(path, wanted[entry]):
            path.unlink(missing_ok=True)
            changed = True
    for name, target in wanted.items():
        path = directory / name
        if _is_link_to(path, target):
            continue
        temporary = directory / f".{name}.tmp"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(target)
        temporary.replace(path)
        changed = True
    if changed:
        log.debug("container sysfs view %s now lists %d devices", directory, len(wanted))
    return changed


def _is_link_to(path: Path, target: str) -> bool:
    try:
        return os.readlink(path) == target
    except OSError:
        return False
