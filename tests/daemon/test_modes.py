"""The mode is chosen once, in the composition root: device-plugin by default, DRA on request,
and DRA without a node name is a one-line refusal (exit 2) before anything starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kae_deviceplugin.cli.demo import demo_settings
from kae_deviceplugin.daemon.run import build_for_mode
from kae_deviceplugin.errors import StartupError


def test_the_default_mode_builds_the_device_plugin_front_end(tmp_path: Path) -> None:
    """No mode set: the device-plugin front end."""
    assert build_for_mode(demo_settings(tmp_path)).front.name == "device-plugin"


def test_dra_mode_builds_the_dra_front_end_for_the_named_node(tmp_path: Path) -> None:
    """mode dra with a node name and a kubeconfig: the DRA front end, sockets under the kubelet
    root's plugins/ and plugins_registry/."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    settings = dataclasses.replace(
        demo_settings(tmp_path), mode="dra", node_name="node-a", kubeconfig=kubeconfig
    )
    front = build_for_mode(settings).front
    assert front.name == "dra"
    assert "node node-a" in front.describe()
    assert (
        str(settings.kubelet_root / "plugins" / "kae.openfuyao.com" / "dra.sock")
        in front.describe()
    )


def test_dra_mode_without_a_node_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither --node-name nor NODE_NAME: StartupError, exit 2, naming both."""
    monkeypatch.delenv("NODE_NAME", raising=False)
    settings = dataclasses.replace(demo_settings(tmp_path), mode="dra")
    with pytest.raises(
        StartupError, match=r"--node-name \(KAE_DP_NODE_NAME\) or NODE_NAME"
    ) as caught:
        build_for_mode(settings)
    assert caught.value.exit_code == 2


def test_dra_mode_without_any_credentials_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node name but no kubeconfig outside a pod: StartupError, exit 3, naming the fix."""
    monkeypatch.setenv("NODE_NAME", "node-a")
    settings = dataclasses.replace(demo_settings(tmp_path), mode="dra")
    with pytest.raises(StartupError, match="--kubeconfig FILE") as caught:
        build_for_mode(settings)
    assert caught.value.exit_code == 3
