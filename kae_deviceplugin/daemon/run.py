"""Process-level start-up of `serve`: the event loop, the optional root tasks, the exit code."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from kae_deviceplugin import __version__
from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.daemon.hotplug import udev_task
from kae_deviceplugin.daemon.memory import release_startup_memory
from kae_deviceplugin.daemon.preflight import (
    check_kubelet_root,
    check_listen,
    check_roots,
    prepare_socket_dir,
)
from kae_deviceplugin.daemon.supervisor import Daemon
from kae_deviceplugin.errors import KaeDevicePluginError
from kae_deviceplugin.observability import http, nfd

log = logging.getLogger(__name__)

RootTask = Callable[[Daemon], Coroutine[Any, Any, None]]


def optional_tasks(settings: Settings) -> list[RootTask]:
    """Root tasks beside the scan and kubelet loops; each survives every outside failure."""
    tasks: list[RootTask] = [udev_task, release_startup_memory]
    if settings.metrics_address:
        tasks.append(http.metrics_task)
    if settings.nfd_features_file is not None:
        tasks.append(nfd.nfd_task)
    return tasks


def build_daemon(settings: Settings, source: ConfigSource | None = None) -> Daemon:
    return Daemon(settings, source, extra_tasks=optional_tasks(settings))


def run_serve(settings: Settings, source: ConfigSource | None = None) -> int:
    """Run serve to its end; the exit code (see the README's table of exit codes)."""
    try:
        check_roots(settings)
        check_kubelet_root(settings)
        check_listen(settings.metrics_address)
        daemon = build_daemon(settings, source)
        registrar = daemon.server_set.registrar
        prepare_socket_dir(daemon.socket_dir, registrar.socket_dir_role)
        log.info(
            "kae-deviceplugin %s starting: sysfs %s, plugin sockets in %s (registration: %s)",
            __version__,
            settings.sysfs_root,
            daemon.socket_dir,  # plugins_registry in plugin-watcher mode, not device-plugins
            "plugin watcher" if registrar.recovery == "restart" else "kubelet.sock",
        )
        return asyncio.run(daemon.run())
    except KaeDevicePluginError as err:
        log.critical("cannot start: %s", err)
        return err.exit_code
