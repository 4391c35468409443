"""What serve checks before it starts, so that a start-up failure is one line with its fix.

Each failure names the path, the cause and what to do. A root that does not exist is a mistake
in the invocation (exit 2, as for any bad option value); a directory the daemon cannot create or
write, or a metrics address it cannot listen on (a busy port), is a problem of the environment
(exit 3): the DaemonSet restarts the pod, and its log says why. A node without ``class/uacce``
is not an error: the daemon starts, says so, and serves the devices when the drivers appear.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

from kae_deviceplugin.config.rules import parse_address
from kae_deviceplugin.config.schema import OPTIONS_BY_FIELD
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.errors import EXIT_ENVIRONMENT, EXIT_USAGE, StartupError
from kae_deviceplugin.observability.http import listen

log = logging.getLogger(__name__)

CLASS_DIR = Path("class") / "uacce"
# How a setting is named in a message: its flag, its variable, or its key in the config file,
# as the user wrote it (ConfigSource.label); the flag where nothing else is known.
Label = Callable[[str], str]


def flag_of(field: str) -> str:
    return OPTIONS_BY_FIELD[field].flag


def check_roots(settings: Settings, label: Label = flag_of) -> None:
    """Refuse a sysfs or dev root that does not exist (exit 2) or that this process may not
    read (exit 3); warn when the uacce class is missing."""
    for field, root in (("sysfs_root", settings.sysfs_root), ("dev_root", settings.dev_root)):
        if not _is_dir(root, label(field)):
            why = "does not exist" if not root.exists() else "is not a directory"
            raise StartupError(
                f"{label(field)} {root} {why}; on a node it is the default, for a fixture tree "
                f"its {'sys' if field == 'sysfs_root' else 'dev'}/ directory",
                code=EXIT_USAGE,
            )
        _check_readable(root, label(field))
    if not _is_dir(settings.sysfs_root / CLASS_DIR, label("sysfs_root")):
        log.warning(
            "%s does not exist: no KAE driver (hisi_hpre, hisi_sec2, hisi_zip) has registered a "
            "uacce device on this node; serving nothing until one appears "
            "(`kae-deviceplugin doctor` explains why)",
            settings.sysfs_root / CLASS_DIR,
        )


def _check_readable(root: Path, setting: str) -> None:
    """Refuse a root this process may not list (a non-root user, a mount of another owner):
    discovery would see nothing there, or fail on every path below it."""
    try:
        with os.scandir(root):
            pass
    except OSError as err:
        raise StartupError(
            f"{setting} {root}: cannot list it ({_cause(err)}); run as root (the chart does), "
            "or give a directory this user can read",
            code=EXIT_ENVIRONMENT,
        ) from None


def _is_dir(path: Path, setting: str) -> bool:
    """``path.is_dir()``, refusing in one line where looking is not allowed (a directory on
    the way this user may not search) rather than raising PermissionError."""
    try:
        return path.is_dir()
    except OSError as err:
        raise StartupError(
            f"{setting}: cannot look at {path} ({_cause(err)}); run as root (the chart does), "
            "or give a directory this user can read",
            code=EXIT_ENVIRONMENT,
        ) from None


def _cause(err: OSError) -> str:
    return os.strerror(err.errno).lower() if err.errno else str(err)


def check_kubelet_root(settings: Settings, label: Label = flag_of) -> None:
    """Refuse a kubelet root that is missing or not a directory, when our sockets go below it.

    Creating it would only wait forever for a kubelet that uses another root; a file there is a
    typo, not a permission problem. (The pod-resources socket below it is only read, and optional.)
    """
    root = settings.kubelet_root
    if settings.device_plugin_dir is not None and settings.registration != "plugin-watcher":
        return
    if root.is_dir():
        return
    why = "is not a directory" if root.exists() else "does not exist"
    raise StartupError(
        f"{label('kubelet_root')} {root} {why}; it must name the kubelet's --root-dir "
        "(default /var/lib/kubelet; k0s: /var/lib/k0s/kubelet)",
        code=EXIT_USAGE,
    )


def _ascii(host: str) -> str | bytes:
    """``host`` as bytes when it is ASCII (an IP address, most names), which getaddrinfo takes
    as they are; a str host it first encodes with the "idna" codec, whose import (with
    stringprep and unicodedata) stays resident, ~0.4 MiB, for one lookup at start."""
    return host.encode("ascii") if host.isascii() else host


def check_listen(address: str, flag: str = "--metrics-address") -> None:
    """Bind ``address`` once and let go, so a busy port stops the start (exit 3), not later.

    Port 0 (any free port) and "" (no endpoint) need no bind; a host name that does not
    resolve is a bad value (exit 2), named, rather than the resolver's bare error number.
    """
    if not address:
        return
    host, port = parse_address(address)
    try:
        if host:  # port 0 binds later, but a name that does not resolve never will
            socket.getaddrinfo(_ascii(host), None, type=socket.SOCK_STREAM)
    except socket.gaierror as err:  # errno is the resolver's (-2), which os.strerror cannot name
        raise StartupError(
            f"{flag} {address}: the host {host!r} does not resolve ({err.strerror}); give an IP "
            "address, or a name this node resolves",
            code=EXIT_USAGE,
        ) from None
    if port == 0:
        return
    try:
        listen(host, port).close()
    except OSError as err:
        cause = os.strerror(err.errno).lower() if err.errno else str(err)
        off = "" if flag == "--serve" else f' ({flag} "" turns the endpoint off)'
        raise StartupError(
            f"{flag} {address}: cannot listen ({cause}); free the port or choose another{off}",
            code=EXIT_ENVIRONMENT,
        ) from None
