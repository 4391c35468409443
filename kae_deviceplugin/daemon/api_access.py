"""What DRA mode and ``mode: auto`` need to reach the API server: the node's name (its slices,
its Node object) and the client, each refused in one line that names the setting to fix."""

from __future__ import annotations

import os

from kae_deviceplugin.apiserver.rest_api import RestApi, connect
from kae_deviceplugin.config.resolve import check_node_name_variable
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.daemon.preflight import Label
from kae_deviceplugin.errors import EXIT_USAGE, InvalidConfig, KubeconfigError, StartupError


def node_name(settings: Settings) -> str:
    """``--node-name``, else $NODE_NAME; a refusal naming both when neither is set."""
    try:
        check_node_name_variable(settings, os.environ)  # as --node-name's own rule judges it
    except InvalidConfig as err:
        raise StartupError(str(err), code=EXIT_USAGE) from None
    name = settings.node_name or os.environ.get("NODE_NAME", "")
    if not name:
        raise StartupError(
            f"--mode {settings.mode} needs the node's name: set --node-name (KAE_DP_NODE_NAME) "
            "or NODE_NAME",
            code=EXIT_USAGE,
        )
    return name


def client(settings: Settings, label: Label) -> RestApi:
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
