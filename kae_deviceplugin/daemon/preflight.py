"""What serve checks before it starts, so that a start-up failure is one line with its fix.

Each failure names the path, the cause and what to do. A root that does not exist is a mistake
in the invocation (exit 2, as for any bad option value); a directory the daemon cannot create or
write, or a metrics address it cannot listen on (a busy port), is a problem of the environment
(exit 3): the DaemonSet restarts the pod, and its log says why. A node without ``class/uacce``
is not an error: the daemon starts, says so, and serves the devices when the drivers appear.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

from kae_deviceplugin.config.rules import parse_address
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.errors import StartupError
from kae_deviceplugin.observability.http import listen

log = logging.getLogger(__name__)

EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3
CLASS_DIR = Path("class") / "uacce"


def check_roots(settings: Settings) -> None:
    """Refuse a sysfs or dev root that does not exist; warn when the uacce class is missing."""
    for flag, root in (("--sysfs-root", settings.sysfs_root), ("--dev-root", settings.dev_root)):
        if not root.is_dir():
            why = "does not exist" if not root.exists() else "is not a directory"
            raise StartupError(
                f"{flag} {root} {why}; on a node it is the default, for a fixture tree its "
                f"{'sys' if flag == '--sysfs-root' else 'dev'}/ directory",
                code=EXIT_USAGE,
            )
    if not (settings.sysfs_root / CLASS_DIR).is_dir():
        log.warning(
            "%s does not exist: no KAE driver (hisi_hpre, hisi_sec2, hisi_zip) has registered a "
            "uacce device on this node; serving nothing until one appears "
            "(`kae-deviceplugin doctor` explains why)",
            settings.sysfs_root / CLASS_DIR,
        )


def prepare_socket_dir(directory: Path, what: str) -> None:
    """Create (if needed) the directory our sockets go in, or say in one line why it cannot."""
    fix = f"run as root, or mount the kubelet's {what} directory read-write"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StartupError(
            f"{directory} exists and is not a directory; remove it or point the daemon at the "
            f"kubelet's {what} directory",
            code=EXIT_ENVIRONMENT,
        ) from None
    except OSError as err:
        cause = "permission denied" if err.errno in (errno.EACCES, errno.EPERM) else err.strerror
        raise StartupError(
            f"{directory}: cannot create the socket directory ({cause}); {fix}",
            code=EXIT_ENVIRONMENT,
        ) from None
    if not directory.is_dir():
        raise StartupError(f"{directory} is not a directory; {fix}", code=EXIT_ENVIRONMENT)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StartupError(
            f"{directory}: not writable, so no socket can be created there; {fix}",
            code=EXIT_ENVIRONMENT,
        )


def check_kubelet_root(settings: Settings) -> None:
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
        f"--kubelet-root {root} {why}; it must name the kubelet's --root-dir "
        "(default /var/lib/kubelet; k0s: /var/lib/k0s/kubelet)",
        code=EXIT_USAGE,
    )


def check_listen(address: str, flag: str = "--metrics-address") -> None:
    """Bind ``address`` once and let go, so a busy port stops the start (exit 3), not later.

    Port 0 (any free port) and "" (no endpoint) need no check.
    """
    if not address:
        return
    host, port = parse_address(address)
    if port == 0:
        return
    try:
        listen(host, port).close()
    except OSError as err:
        cause = os.strerror(err.errno).lower() if err.errno else str(err)
        off = f' ({flag} "" turns the endpoint off)' if flag == "--metrics-address" else ""
        raise StartupError(
            f"{flag} {address}: cannot listen ({cause}); free the port or choose another{off}",
            code=EXIT_ENVIRONMENT,
        ) from None
