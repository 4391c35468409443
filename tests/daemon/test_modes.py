"""The mode is chosen once, in the composition root: device-plugin by default, DRA on request,
and DRA without a node name is a one-line refusal (exit 2) before anything starts."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.cli.demo import demo_settings
from kae_deviceplugin.daemon.run import build_for_mode
from kae_deviceplugin.errors import StartupError
from tests.support.harness import short_tmpdir


@pytest.fixture
def short_path() -> Iterator[Path]:
    """A directory under /tmp short enough for the DRA sockets below it: pytest's tmp_path is
    too long for them, and under so long a kubelet root serve refuses to start."""
    with short_tmpdir() as path:
        yield path


def test_the_default_mode_builds_the_device_plugin_front_end(tmp_path: Path) -> None:
    """No mode set: the device-plugin front end."""
    assert build_for_mode(demo_settings(tmp_path)).front.name == "device-plugin"


def test_dra_mode_builds_the_dra_front_end_for_the_named_node(short_path: Path) -> None:
    """mode dra with a node name and a kubeconfig: the DRA front end, sockets under the kubelet
    root's plugins/ and plugins_registry/."""
    tmp_path = short_path
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


def _dra_settings(tmp_path: Path) -> Any:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    return dataclasses.replace(
        demo_settings(tmp_path), mode="dra", node_name="node-a", kubeconfig=kubeconfig
    )


def test_a_file_where_the_plugin_directory_goes_is_one_line_and_exit_3(tmp_path: Path) -> None:
    """<kubelet-root>/plugins/kae.openfuyao.com is a regular file: a StartupError (exit 3)
    naming that path and what it must be, not a NotADirectoryError traceback."""
    settings = _dra_settings(tmp_path)
    plugin = settings.kubelet_root / "plugins" / "kae.openfuyao.com"
    plugin.parent.mkdir(parents=True, exist_ok=True)
    plugin.write_text("in the way")
    with pytest.raises(StartupError, match="must be a directory") as caught:
        build_for_mode(settings)
    assert caught.value.exit_code == 3 and str(plugin) in str(caught.value)


def test_a_file_as_the_cdi_directory_is_refused_before_any_socket(short_path: Path) -> None:
    """--cdi-dir names a regular file: the front end's prepare (before any socket is bound)
    refuses with exit 3 naming the flag and the path."""
    tmp_path = short_path
    cdi = tmp_path / "cdi-file"
    cdi.write_text("in the way")
    settings = dataclasses.replace(_dra_settings(tmp_path), cdi_dir=cdi)
    front = build_for_mode(settings).front
    with pytest.raises(StartupError, match=r"--cdi-dir .*cdi-file: Not a directory") as caught:
        front.prepare()
    assert caught.value.exit_code == 3
    assert not list((settings.kubelet_root / "plugins_registry").glob("*.sock"))


def test_a_bad_node_name_variable_is_refused_like_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NODE_NAME that is no node name, with no --node-name: exit 2 naming the variable, as the
    flag's own rule would refuse it."""
    monkeypatch.setenv("NODE_NAME", "Not_A_Node!")
    settings = dataclasses.replace(_dra_settings(tmp_path), node_name=None)
    with pytest.raises(StartupError, match="NODE_NAME") as caught:
        build_for_mode(settings)
    assert caught.value.exit_code == 2
