"""What serve checks before it starts, so that a start-up failure is one line with its fix.

Each failure names the path, the cause and what to do. A root that does not exist is a mistake
in the invocation (exit 2, as for any bad option value); a directory the daemon cannot create or
write is a problem of the environment (exit 3). A node without ``class/uacce`` is not an error:
the daemon starts, says so, and serves the devices when the drivers appear.
"""

from __future__ import annotations

import logging
from pathlib import Path

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.errors import EXIT_USAGE, StartupError

log = logging.getLogger(__name__)

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
