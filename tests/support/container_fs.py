"""A container's filesystem as a runtime would assemble it from Allocate answers, for reading only.

The kubelet merges a container's answers first-wins per container path; the runtime then bind-
mounts each host path at its container path. Here mounts are path mappings, and symlinks found on
the host side are resolved in the *container's* namespace, as the kernel would inside the container.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Sequence
from pathlib import Path

from kae_deviceplugin.api import pb

MAX_LINKS = 40


class ContainerFS:
    def __init__(self, mounts: dict[str, str]) -> None:
        self.mounts = mounts  # container path -> real path on this machine

    @classmethod
    def from_answers(
        cls,
        answers: Sequence[pb.ContainerAllocateResponse],
        host_root: Path,
        host_paths: dict[str, Path],
    ) -> ContainerFS:
        """Merge answers first-wins, as the kubelet does, on top of the container's own /sys.

        ``host_paths`` maps host path prefixes (``/sys``, ``/dev``) to the fixture tree standing in
        for the host; other host paths (the state dir) are real paths already.
        """
        mounts: dict[str, str] = {"/sys": str(host_paths["/sys"])}

        def host(path: str) -> str:
            for prefix, real in host_paths.items():
                if path == prefix or path.startswith(prefix + "/"):
                    return str(real) + path[len(prefix) :]
            return path

        for answer in answers:
            for spec in answer.devices:
                mounts.setdefault(spec.container_path, host(spec.host_path))
            for mount in answer.mounts:
                mounts.setdefault(mount.container_path, host(mount.host_path))
        del host_root
        return cls(mounts)

    def _host(self, path: str) -> str | None:
        best = max(
            (m for m in self.mounts if path == m or path.startswith(m.rstrip("/") + "/")),
            key=len,
            default=None,
        )
        if best is None:
            return None
        return self.mounts[best] + path[len(best) :]

    def resolve(self, path: str, links: int = 0) -> str:
        """The container path with every symlink resolved; raises OSError if a link dangles."""
        current = "/"
        for part in [p for p in path.split("/") if p not in ("", ".")]:
            if part == "..":
                current = posixpath.dirname(current)
                continue
            candidate = posixpath.join(current, part)
            real = self._host(candidate)
            if real is not None and os.path.islink(real):
                if links >= MAX_LINKS:
                    raise OSError(40, "too many links", candidate)
                target = os.readlink(real)
                joined = target if target.startswith("/") else posixpath.join(current, target)
                current = self.resolve(joined, links + 1)
            else:
                current = candidate
        return current

    def real(self, path: str) -> str:
        resolved = self.resolve(path)
        real = self._host(resolved)
        if real is None or not os.path.lexists(real):
            raise FileNotFoundError(path)
        return real

    def read(self, path: str) -> str:
        with open(self.real(path)) as handle:
            return handle.read()

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(self.real(path)))

    def exists(self, path: str) -> bool:
        try:
            self.real(path)
        except OSError:
            return False
        return True


def uadk_usable_devices(fs: ContainerFS, wanted_algorithms: Iterable[str] = ()) -> set[str]:
    """The devices UADK v2 would consider, reading /sys/class/uacce the way it does.

    It skips an entry whose algorithms it cannot read (or that lacks a wanted one), one isolated,
    and one whose device/numa_node it cannot read; it also reads flags, region sizes, api and
    available_instances. A usable device's /dev node must exist for the open that follows.
    """
    usable = set()
    for name in fs.listdir("/sys/class/uacce"):
        base = f"/sys/class/uacce/{name}"
        try:
            algorithms = fs.read(f"{base}/algorithms").split()
            if any(alg not in algorithms for alg in wanted_algorithms):
                continue
            if fs.exists(f"{base}/isolate") and fs.read(f"{base}/isolate").strip() == "1":
                continue
            int(fs.read(f"{base}/device/numa_node"))
            for attribute in ("flags", "api", "available_instances"):
                fs.read(f"{base}/{attribute}")
        except (OSError, ValueError):
            continue
        if not fs.exists(f"/dev/{name}"):
            raise AssertionError(f"UADK would pick {name} but /dev/{name} is not in the container")
        usable.add(name)
    return usable
