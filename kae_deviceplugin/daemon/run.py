"""The composition root of `serve`: builds every part once, picks the mode, runs, maps the exit.

Nothing else constructs the daemon's parts, so what a process runs is read here in one place:
the scanner, the front end (with its registrar, server set and kubelet watch), the node-wide
container files, and the optional root tasks, each handed only what it reads.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from kae_deviceplugin import __version__
from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.daemon.host_files import remove_if_unused
from kae_deviceplugin.daemon.hotplug import udev_task
from kae_deviceplugin.daemon.memory import release_startup_memory
from kae_deviceplugin.daemon.preflight import (
    Label,
    check_kubelet_root,
    check_listen,
    check_roots,
    flag_of,
)
from kae_deviceplugin.daemon.scanloop import scan_loop_for
from kae_deviceplugin.daemon.supervisor import Daemon, Heartbeats, RootTask
from kae_deviceplugin.daemon.vf_profiles import VfWriter
from kae_deviceplugin.daemon.vf_requests import vf_profiles_for
from kae_deviceplugin.deviceplugin.frontend import DevicePluginFrontEnd
from kae_deviceplugin.deviceplugin.registrars import choose_registrar
from kae_deviceplugin.errors import KaeDevicePluginError
from kae_deviceplugin.observability import http, nfd
from kae_deviceplugin.observability.metrics import register_mode_info

log = logging.getLogger(__name__)

# A task an embedding program (the demo, a test) adds; it is handed the whole daemon.
EmbeddedTask = Callable[["DevicePluginDaemon"], Coroutine[Any, Any, None]]
DevicePluginDaemon = Daemon[DevicePluginFrontEnd]


def optional_tasks(
    settings: Settings, daemon: Daemon[Any], endpoint: http.EndpointTask | None = None
) -> list[RootTask]:
    """Root tasks beside the scan loop and the front end's; each survives every outside failure
    and may simply return when it has nothing (more) to do. ``endpoint`` serves the HTTP
    endpoint (a caller that must learn the port it bound passes its own)."""
    scan = daemon.scan
    tasks: list[RootTask] = [functools.partial(udev_task, scan), release_startup_memory]
    if settings.metrics_address:
        tasks.append(functools.partial((endpoint or http.EndpointTask()).run, daemon))
    if settings.nfd_features_file is not None:
        tasks.append(functools.partial(nfd.nfd_task, scan))
    return tasks


def build_daemon(
    settings: Settings,
    source: ConfigSource | None = None,
    extra_tasks: Sequence[EmbeddedTask] = (),
    *,
    counters: Counters | None = None,
    with_optional: bool = True,
    endpoint: http.EndpointTask | None = None,
    vf_writer: VfWriter | None = None,
) -> DevicePluginDaemon:
    """Every part of a device-plugin daemon, built once and wired here.

    ``with_optional=False`` leaves out the optional root tasks (udev, heap trim, HTTP, NFD), for
    tests that run the daemon in-process and add the one they exercise as an ``extra_tasks``.
    ``vf_writer`` writes a PF's ``sriov_numvfs`` (default: as the settings say)."""
    counters = counters or Counters()  # this daemon's own registry, not a global
    stopping = asyncio.Event()  # asyncio primitives bind to the loop that first uses them
    heartbeats = Heartbeats()
    container_files = ContainerFiles()
    # The registration mode is decided here, once; nothing re-tests the filesystem for it.
    registrar = choose_registrar(settings)
    front = DevicePluginFrontEnd(
        settings,
        registrar,
        counters,
        container_files,
        stopping=stopping,
        tick=heartbeats.ticker("watch"),
    )
    scan = scan_loop_for(
        settings,
        counters,
        front.reconcile,
        container_files,
        tick=heartbeats.ticker("scan"),
        source=source,
        profiles=vf_profiles_for(settings, vf_writer),
    )
    daemon = Daemon(
        scan,
        front,
        heartbeats,
        stopping,
        cleanup=remove_if_unused,
    )
    for task in optional_tasks(settings, daemon, endpoint) if with_optional else []:
        daemon.add_task(task)
    for embedded in extra_tasks:
        daemon.add_task(functools.partial(embedded, daemon))
    return daemon


def build_for_mode(
    settings: Settings, source: ConfigSource | None = None, label: Label | None = None
) -> Daemon[Any]:
    """The daemon of the mode the settings name (``auto``: the one chosen now), with every
    optional task; ``label`` names a setting in a refusal as the user wrote it (default: the
    file's key, else the flag)."""
    configured, reason, mark = settings.mode, "configured", None
    if settings.mode == "auto":
        # Imported here: an explicit device-plugin mode loads no API client.
        from kae_deviceplugin.daemon.mode_auto import start_auto  # noqa: PLC0415

        settings, mark = start_auto(settings, label or _label_of(source))
        reason = mark.decision.choice.reason.code
        if source is not None:  # a reload keeps the mode chosen now, as a flag's, unwarned
            source.overrides["mode"] = settings.mode
    if settings.mode != "dra":
        daemon: Daemon[Any] = build_daemon(settings, source)
    else:
        # Imported here, not at the top: device-plugin mode must load none of DRA's modules.
        from kae_deviceplugin.daemon.run_dra import build_dra_daemon  # noqa: PLC0415

        daemon = build_dra_daemon(settings, source, Counters(), label)
        for task in optional_tasks(settings, daemon):
            daemon.add_task(task)
    register_mode_info(daemon.counters.registry, configured, settings.mode, reason)
    if mark is not None:
        daemon.add_task(mark.run)
    return daemon


def _label_of(source: ConfigSource | None) -> Label:
    return source.label if source is not None else flag_of


def run_serve(
    settings: Settings, source: ConfigSource | None = None, label: Label | None = None
) -> int:
    """Run serve to its end; the exit code (see the README's table of exit codes). ``label``
    names a setting as the user wrote it (its flag, variable or file key); without one, the
    file's key where the file set it, else the flag."""
    try:
        if label is None:
            label = source.label if source is not None else flag_of
        check_roots(settings, label)
        check_kubelet_root(settings, label)
        check_listen(settings.metrics_address, label("metrics_address"))
        daemon = build_for_mode(settings, source, label)
        daemon.front.prepare()  # a socket directory it cannot use: one line and exit 3, now
        log.info(
            "kae-deviceplugin %s starting: sysfs %s, %s",
            __version__,
            settings.sysfs_root,
            daemon.front.describe(),
        )
        return asyncio.run(daemon.run())
    except KaeDevicePluginError as err:
        log.critical("cannot start: %s", err)
        return err.exit_code
