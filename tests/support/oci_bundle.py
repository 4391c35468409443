"""A minimal OCI bundle run by a real runc, for tests that want a kernel-made container view.

The rootfs holds nothing of its own: the host's /usr is bind-mounted read-only and the usrmerge
symlinks (/bin, /lib, ...) point into it, so any Debian shell tool runs inside. Allocate answers
become OCI bind mounts, merged first-wins per container path as the kubelet merges them.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kae_deviceplugin.api import pb

RUN_TIMEOUT = 60.0
DELETE_TIMEOUT = 30.0
# The usrmerge layout of Debian bookworm: these top-level names are symlinks into /usr.
USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
MOUNTPOINTS = ("usr", "proc", "dev", "sys", "run", "tmp")

Mount = dict[str, Any]


def bind(source: str | Path, destination: str, read_only: bool = True) -> Mount:
    options = ["rbind", "ro" if read_only else "rw", "nosuid"]
    return {"destination": destination, "type": "bind", "source": str(source), "options": options}


def base_mounts() -> list[Mount]:
    """What every container gets before the device plugin's mounts: /proc, a private /dev, /usr."""
    return [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {
            "destination": "/dev",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "noexec", "mode=755", "size=1m"],
        },
        bind("/usr", "/usr"),
    ]


def allocate_mounts(
    answers: Sequence[pb.ContainerAllocateResponse], host_paths: Mapping[str, Path]
) -> list[Mount]:
    """The answers' devices and mounts as OCI bind mounts, first answer wins per container path.

    ``host_paths`` maps host prefixes (``/sys``, ``/dev``) to the fixture tree standing in for the
    host; other host paths (the daemon's state dir) are real already. Device nodes are fixture
    files, so a bind mount stands in for the device node a runtime would create.
    """

    def host(path: str) -> Path:
        for prefix, real in host_paths.items():
            if path == prefix or path.startswith(prefix + "/"):
                return real / path[len(prefix) :].lstrip("/")
        return Path(path)

    seen: set[str] = set()
    mounts: list[Mount] = []
    for answer in answers:
        for mount in answer.mounts:
            if mount.container_path not in seen:
                seen.add(mount.container_path)
                mounts.append(bind(host(mount.host_path), mount.container_path, mount.read_only))
        for spec in answer.devices:
            if spec.container_path not in seen:
                seen.add(spec.container_path)
                mounts.append(bind(host(spec.host_path), spec.container_path, read_only=False))
    return mounts


def config(args: Sequence[str], mounts: Sequence[Mount], env: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(args),
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", *env],
            "cwd": "/",
            # The inherited open-files limit can exceed what the container may set; keep it low.
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "kae-test",
        "mounts": list(mounts),
        "linux": {
            "namespaces": [{"type": kind} for kind in ("pid", "mount", "ipc", "uts", "network")],
        },
    }


def _assert_unmounted(bundle: Path) -> None:
    # rmtree must never descend into a live bind of the host's /usr or the fixture.
    for path in [bundle, *bundle.rglob("*")]:
        if path.is_dir() and not path.is_symlink() and os.path.ismount(path):
            raise AssertionError(f"{path} is still a mount point; not removing the bundle")


@contextmanager
def bundle_dir(
    args: Sequence[str], mounts: Sequence[Mount], env: Sequence[str] = ()
) -> Iterator[Path]:
    """A bundle under a short /tmp path, removed afterwards."""
    bundle = Path(tempfile.mkdtemp(prefix="kaeoci", dir="/tmp"))
    try:
        rootfs = bundle / "rootfs"
        for name in MOUNTPOINTS:
            (rootfs / name).mkdir(parents=True)
        for name in USR_LINKS:
            if (Path("/usr") / name).is_dir():
                (rootfs / name).symlink_to(f"usr/{name}")
        (bundle / "config.json").write_text(json.dumps(config(args, mounts, env), indent=2))
        yield bundle
    finally:
        _assert_unmounted(bundle)
        shutil.rmtree(bundle)


def run(
    args: Sequence[str],
    mounts: Sequence[Mount],
    timeout: float = RUN_TIMEOUT,
    env: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in a fresh container (``env``: more ``NAME=value`` for its process) and
    return its exit status and output."""
    container_id = f"kae-{os.getpid()}-{uuid.uuid4().hex[:10]}"
    with bundle_dir(args, mounts, env) as bundle:
        try:
            return subprocess.run(
                ["runc", "run", "--bundle", str(bundle), container_id],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        finally:
            subprocess.run(
                ["runc", "delete", "-f", container_id],
                capture_output=True,
                timeout=DELETE_TIMEOUT,
                check=False,
            )


@functools.cache
def runc_unusable() -> str | None:
    """Why runc cannot run a container here, or None if a trivial one runs and prints."""
    if shutil.which("runc") is None:
        return "runc is not installed (apt-get install -y runc)"
    try:
        result = run(["sh", "-c", "echo ok"], base_mounts())
    except (OSError, subprocess.SubprocessError) as err:
        return f"runc probe failed: {err}"
    if result.returncode != 0 or result.stdout.strip() != "ok":
        return f"runc probe exited {result.returncode}: {result.stderr.strip()[:500]}"
    return None
