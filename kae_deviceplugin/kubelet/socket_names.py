"""Socket names that fit a unix socket address, whatever the kubelet's root; else a refusal.

Linux's ``sockaddr_un.sun_path`` has 108 bytes, its terminating NUL included, so a socket path
has at most 107 bytes: gRPC refuses a longer one ("Path name should not have more than 107
characters"), and so does Go, so the kubelet could not dial it either. Upstream's DRA helper
(k8s.io/dynamic-resource-allocation/kubeletplugin) takes the first of a list of names whose
full path is shorter than 108 bytes (kubernetes#139623; #141815 made the bound strict), the
later names shorter and built from a SHA-256 digest, URL-safe base64 without padding
(kubernetes#142003 does the same for the service socket). Each front end lists its own names
this way; when even the shortest passes the limit, the start is refused in one line naming
the setting that placed the directory and the longest root that would do.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from kae_deviceplugin.errors import EXIT_ENVIRONMENT, StartupError

SUN_PATH_BYTES = 108  # sizeof(sockaddr_un.sun_path) on Linux
MAX_PATH_BYTES = SUN_PATH_BYTES - 1  # the terminating NUL takes the last byte


def path_bytes(directory: Path | str, name: str) -> int:
    """The length of ``directory/name`` as the kernel counts it (bytes, not characters)."""
    return len(os.fsencode(os.path.join(directory, name)))


def fits(directory: Path | str, name: str) -> bool:
    """Whether a socket ``name`` in ``directory`` can be bound and dialled."""
    return path_bytes(directory, name) <= MAX_PATH_BYTES


def digest(*parts: str, size: int) -> str:
    """``size`` bytes of the SHA-256 of ``parts`` joined by NUL, URL-safe base64 unpadded: a
    short name part that stays the same for the same input (no '.' to hide it, no '/')."""
    joined = "\0".join(parts).encode()
    raw = hashlib.sha256(joined).digest()[:size]
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class SocketPathTooLong(StartupError):
    """No name of a socket fits below its directory (exit 3, the environment's code)."""

    def __init__(self, directory: Path, shortest: str, setting: str, root: Path) -> None:
        length = path_bytes(directory, shortest)
        below_root = length - len(os.fsencode(str(root)))
        longest_root = MAX_PATH_BYTES - below_root
        super().__init__(
            f"{setting} {root}: the socket {directory / shortest} would be {length} bytes long, "
            f"over the {MAX_PATH_BYTES} a unix socket path can have (sun_path is "
            f"{SUN_PATH_BYTES} bytes); {setting} can be at most {max(longest_root, 0)} bytes "
            "long",
            code=EXIT_ENVIRONMENT,
        )
        self.directory = directory


def first_fitting(
    directory: Path, names: Sequence[str], setting: str, root: Path, *, strict: bool = True
) -> Path:
    """``directory`` joined with the first of ``names`` that fits (they go from the preferred
    to the shortest); SocketPathTooLong, naming ``setting`` and its value ``root``, when none
    does, or with ``strict`` off the last name (for what only describes the sockets)."""
    for name in names:
        if fits(directory, name):
            return directory / name
    if not strict:
        return directory / names[-1]
    raise SocketPathTooLong(directory, min(names, key=len), setting, root)
