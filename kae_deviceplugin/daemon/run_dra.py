"""The composition root's DRA branch: loaded only when ``mode`` is ``dra``, so a device-plugin
node never imports the API client, the DRA protos or the DRA front end (a test says so)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from kae_deviceplugin.apiserver.hints import HintedApi
from kae_deviceplugin.apiserver.paced import PacedApi
from kae_deviceplugin.apiserver.rest_api import RestApi, connect
from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.config.resolve import check_node_name_variable
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.daemon.preflight import Label, flag_of
from kae_deviceplugin.daemon.scanloop import scan_loop_for
from kae_deviceplugin.daemon.supervisor import Daemon, Heartbeats
from kae_deviceplugin.daemon.vf_requests import vf_profiles_for
from kae_deviceplugin.dra.api import plugin_dir
from kae_deviceplugin.dra.frontend import DraFrontEnd
from kae_deviceplugin.dra.vf_claims import prepared_claims
from kae_deviceplugin.errors import (
    EXIT_ENVIRONMENT,
    EXIT_USAGE,
    InvalidConfig,
    KubeconfigError,
    StartupError,
)


def node_name(settings: Settings) -> str:
    """``--node-name``, else $NODE_NAME; a refusal naming both when neither is set."""
    try:
        check_node_name_variable(settings, os.environ)  # as --node-name's own rule judges it
    except InvalidConfig as err:
        raise StartupError(str(err), code=EXIT_USAGE) from None
    name = settings.node_name or os.environ.get("NODE_NAME", "")
    if not name:
        raise StartupError(
            "--mode dra needs the node's name: set --node-name (KAE_DP_NODE_NAME) or NODE_NAME",
            code=EXIT_USAGE,
        )
    return name


def _client(settings: Settings, label: Label) -> RestApi:
    """The API client, or a refusal naming the kubeconfig where it was set (``label``: its
    flag, variable or file key) and what is wrong with it; exit 2 for a file that is no
    kubeconfig, 3 for one the daemon cannot read or a pod without its service account."""
    try:
        return connect(settings.kubeconfig)
    except KubeconfigError as err:
        if settings.kubeconfig is None:  # only then is a kubeconfig the suggestion
            raise StartupError(
                f"{err}; outside a pod pass --kubeconfig FILE", code=err.exit_code
            ) from None
        raise StartupError(f"{label('kubeconfig')} {err}", code=err.exit_code) from None


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
        front = DraFrontEnd(settings, paced, node, container_files, paced.lane("claims"))
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
