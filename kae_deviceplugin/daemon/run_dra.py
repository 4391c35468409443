"""The composition root's DRA branch: loaded only when ``mode`` is ``dra``, so a device-plugin
node never imports the API client, the DRA protos or the DRA front end (a test says so)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kae_deviceplugin.apiserver.hints import HintedApi
from kae_deviceplugin.apiserver.paced import PacedApi
from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.daemon.api_access import client as _client
from kae_deviceplugin.daemon.api_access import node_name
from kae_deviceplugin.daemon.preflight import Label, flag_of
from kae_deviceplugin.daemon.scanloop import scan_loop_for
from kae_deviceplugin.daemon.supervisor import Daemon, Heartbeats
from kae_deviceplugin.daemon.vf_requests import vf_profiles_for
from kae_deviceplugin.dra.api import plugin_dir
from kae_deviceplugin.dra.frontend import DraFrontEnd
from kae_deviceplugin.dra.vf_claims import prepared_claims
from kae_deviceplugin.errors import EXIT_ENVIRONMENT, CheckpointError, StartupError

__all__ = ["build_dra_daemon", "node_name"]


def build_dra_daemon(
    settings: Settings,
    source: ConfigSource | None,
    counters: Counters,
    label: Label | None = None,
) -> Daemon[Any]:
    """Every part of a DRA daemon; the optional tasks are added by the caller, as for the other.
    ``label`` names a setting in a refusal as the user wrote it (default: the file's key where
    the file set it, else the flag)."""
    stopping = asyncio.Event()
    heartbeats = Heartbeats()
    container_files = ContainerFiles()
    node = node_name(settings)  # the invocation's mistake (exit 2) before the environment's
    if label is None:
        label = source.label if source is not None else flag_of
    api = HintedApi(_client(settings, label))  # every refusal logged with its fix (RBAC, DRA)
    try:
        paced = PacedApi(api)
        claims, status = paced.lane("claims"), paced.lane("claim status")
        front = DraFrontEnd(settings, paced, node, container_files, claims, status_api=status)
    except CheckpointError as err:  # not to be trusted: one line, the exit code it carries
        raise StartupError(str(err), code=err.exit_code) from None
    except OSError as err:  # the plugin directory or its checkpoint: a file in the way, no access
        named = Path(str(err.filename or ""))  # relative when met on the way down a dir fd
        where = named if named.is_absolute() else plugin_dir(settings.kubelet_root)
        raise StartupError(
            f"cannot use {where}: {err.strerror or err}; it must be a directory this daemon can "
            "write (the chart mounts the kubelet's plugins/kae.openfuyao.com and runs as root)",
            code=EXIT_ENVIRONMENT,
        ) from None
    scan = scan_loop_for(
        settings,
        counters,
        front.reconcile,
        container_files,
        tick=heartbeats.ticker("scan"),
        source=source,
        profiles=vf_profiles_for(settings, claims=prepared_claims(settings.kubelet_root)),
    )
    return Daemon(scan, front, heartbeats, stopping)
