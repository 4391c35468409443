"""The node-wide OpenSSL configuration file (env.opensslConf): written once per content, and a
directory it cannot be written to refuses allocations with one line naming the file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kae_deviceplugin.config.settings import EnvSettings
from kae_deviceplugin.container.allocate import require_view
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.container.openssl_conf import conf_dir, render, write_conf
from kae_deviceplugin.container.serving import ServingPolicy
from kae_deviceplugin.errors import AllocationError
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.dra.inventories import tree_inventory
from tests.support.harness import settings_for


def test_the_file_is_written_once_per_content(tmp_path: Path) -> None:
    """The first sync writes it (readable by every container user), the next finds it equal."""
    assert write_conf(tmp_path) is True
    written = conf_dir(tmp_path) / "openssl.cnf"
    assert written.read_text() == render()
    assert written.stat().st_mode & 0o777 == 0o644
    assert write_conf(tmp_path) is False


def test_an_unwritable_place_refuses_allocations_naming_the_file(tmp_path: Path) -> None:
    """A regular file where the directory belongs: the container files' problem names the
    configuration file, and Allocate refuses with it (as for the sysfs view)."""
    TREES["kunpeng920-2p"].build(tmp_path / "node")
    settings = dataclasses.replace(
        settings_for(tmp_path, sysfs_root=tmp_path / "node" / "sys"),
        env=EnvSettings(openssl_conf=True),
        container_sysfs_view=False,
    )
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    conf_dir(settings.state_dir).write_text("not a directory")
    files = ContainerFiles()
    policy = ServingPolicy.from_settings(settings)
    files.sync(settings, tree_inventory(tmp_path / "node"), policy.container)
    assert files.problem is not None and "OpenSSL configuration" in files.problem
    refused = ServingPolicy.from_settings(settings, files.problem).container
    with pytest.raises(AllocationError, match="OpenSSL configuration"):
        require_view("openfuyao.com/kae.hpre", refused)
