"""Process-level start-up of `serve`: the event loop, the optional endpoints, the exit code."""

from __future__ import annotations

import asyncio
import logging

from . import __version__
from .config import Settings
from .config_source import ConfigSource
from .errors import KaeDevicePluginError
from .supervisor import Daemon

log = logging.getLogger(__name__)


def build_daemon(settings: Settings, source: ConfigSource | None = None) -> Daemon:
    return Daemon(settings, source, extra_tasks=optional_tasks(settings))


def optional_tasks(settings: Settings) -> list:  # type: ignore[type-arg]
    return []


def run_serve(settings: Settings, source: ConfigSource | None = None) -> int:
    log.info(
        "kae-deviceplugin %s starting: sysfs %s, device-plugin dir %s",
        __version__,
        settings.sysfs_root,
        settings.effective_device_plugin_dir,
    )
    try:
        return asyncio.run(build_daemon(settings, source).run())
    except KaeDevicePluginError as err:
        log.critical("cannot run: %s", err)
        return 1
