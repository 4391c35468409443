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

from kae_deviceplugin.container import safe_fs
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


class ViewUnwritable(OSError):
    """The view directory cannot be brought in line; the message names it and says why."""


def sync_view(state_dir: Path, devices: Iterable[UacceDevice]) -> bool:
    """Make the view directory hold exactly one correct link per device; True if anything changed.

    Entries are replaced one by one with rename(), never by swapping the directory: running
    containers bind-mounted this very directory and must see the update. Whatever sits where a
    link belongs (a directory, a file) is removed. All of it goes through directory descriptors,
    so a symlink planted as the view directory (or in it) is never followed: a symlinked or
    foreign view directory is refused. Raises ViewUnwritable naming the directory.
    """
    directory = view_dir(state_dir)
    wanted = {device.name: link_target(device) for device in devices}
    try:
        with safe_fs.open_root(state_dir) as state_fd:
            fd = safe_fs.open_subdir(state_fd, VIEW_DIR_NAME, directory)
            try:
                changed = _sync_entries(fd, wanted)
            finally:
                os.close(fd)
    except safe_fs.UnsafePath:
        raise
    except OSError as err:
        raise ViewUnwritable(f"cannot write the container view {directory}: {_why(err)}") from err
    if changed:
        log.debug("container sysfs view %s now lists %d devices", directory, len(wanted))
    return changed


def view_problem(state_dir: Path) -> str | None:
    """Why the view written earlier can no longer be handed out, looking without writing: the
    state dir or the view directory swapped for a symlink (or made another user's), or gone.
    None while both are directories of ours. For a caller that must notice between syncs."""
    directory = view_dir(state_dir)
    try:
        with safe_fs.open_root(state_dir, create=False) as state_fd:
            os.close(safe_fs.open_subdir(state_fd, VIEW_DIR_NAME, directory, create=False))
    except safe_fs.UnsafePath as err:
        return str(err)
    except OSError as err:
        return f"cannot write the container view {directory}: {_why(err)}"
    return None


def _sync_entries(fd: int, wanted: dict[str, str]) -> bool:
    changed = False
    for entry in os.listdir(fd):
        if entry not in wanted or safe_fs.read_link(fd, entry) != wanted[entry]:
            safe_fs.remove_entry(fd, entry)
            changed = True
    for name, target in wanted.items():
        if safe_fs.read_link(fd, name) != target:
            safe_fs.replace_symlink(fd, name, target)
            changed = True
    return changed


def _why(err: OSError) -> str:
    where = f" ({err.filename})" if err.filename is not None else ""
    return f"{err.strerror or err}{where}"
