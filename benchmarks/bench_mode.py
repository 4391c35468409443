"""The two modes a node runs the daemon in, and how a benchmark puts a process in each.

* ``uevents``, the production mode: the kernel's sysfs at ``/sys``, whose uevents cover devices
  coming and going, ``/dev`` nodes and driver links, so a tick reads only what changes without
  one. Here the daemon runs under ``umockdev-wrapper`` with ``UMOCKDEV_DIR`` set to the tree:
  umockdev's preload shows the tree at ``/sys`` and ``/dev`` and gives the daemon a working
  uevent monitor, so the daemon takes the tree for the kernel's, as on a node.
* ``ticks``, the every-tick mode: no udev (a monitor that cannot be opened, a container without
  netlink access, or a tree that is not the kernel's sysfs), so every tick also looks at what
  uevents would have reported. Here: the tree's own paths, which are not the kernel's sysfs.

The floor plugin of a mode runs the same way (under the wrapper for ``uevents``), so that a
ratio to it divides out what the preload costs.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

LIBRARIES = ("libumockdev.so.0", "libumockdev-preload.so.0")


@dataclass(frozen=True)
class Mode:
    key: str  # stable: in the figures' keys
    label: str
    uevents: bool

    def command(
        self, command: Sequence[str], root: Path | None
    ) -> tuple[list[str], dict[str, str]]:
        """``command`` as this mode runs it, and its environment; ``root`` is the tree's
        (``root/sys``, ``root/dev``) or None for a process that reads no tree (the floor)."""
        env = dict(os.environ)
        if not self.uevents:
            return list(command), env
        wrapper = shutil.which("umockdev-wrapper")
        if wrapper is None:
            raise RuntimeError(f"{self.label} mode needs umockdev-wrapper")
        args = list(command)
        if root is not None:
            env["UMOCKDEV_DIR"] = str(root)
            for option, path in (("--sysfs-root", "/sys"), ("--dev-root", "/dev")):
                args[args.index(option) + 1] = path
        return [wrapper, *args], env


UEVENTS = Mode("uevents", "uevents", uevents=True)
TICKS = Mode("ticks", "every tick", uevents=False)
MODES = (UEVENTS, TICKS)


def missing(mode: Mode) -> str | None:
    """Why ``mode`` cannot be measured here (umockdev not installed), or None."""
    if not mode.uevents:
        return None
    if shutil.which("umockdev-wrapper") is None:
        return "n/a (needs umockdev)"
    for library in LIBRARIES:
        try:
            ctypes.CDLL(library)
        except OSError:
            return f"n/a (needs umockdev: {library})"
    return None


def available(modes: Sequence[Mode] = MODES) -> list[Mode]:
    return [mode for mode in modes if missing(mode) is None]
