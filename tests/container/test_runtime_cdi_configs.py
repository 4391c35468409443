"""The device plugin's ``cdi: on`` where the runtime does not apply CDI devices: judged from the
runtime's config file alone (no Node in that mode), and Allocate then names device nodes and
mounts, so that no container starts without its devices."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kae_deviceplugin.container.runtime_cdi import config_paths, from_configs
from tests.support.harness import running_node

HPRE = "openfuyao.com/kae.hpre"
V3 = b'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n'
ON_17 = b'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n'
OFF_17 = b'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = false\n'
SILENT_17 = b'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p"\n'


@pytest.mark.parametrize(
    ("config", "applies"),
    [
        (V3, True),  # only containerd 2.x reads a version 3 config
        (ON_17, True),
        (OFF_17, False),  # what containerd 1.7's `config default` writes
        (SILENT_17, None),  # 1.7 would not apply CDI, 2.x would: cannot be told
        (b"version = [", None),
        (None, None),  # no file: nothing to judge by
    ],
)
def test_a_containerd_config_alone(tmp_path: Path, config: bytes | None, applies: bool) -> None:
    path = tmp_path / "config.toml"
    if config is not None:
        path.write_bytes(config)
    support = from_configs(path, tmp_path / "daemon.json")
    assert support.applies is applies
    if support.refused:
        assert "enable_cdi = false" in support.reason and str(path) in support.reason


def test_an_isulad_config_alone_and_both_files(tmp_path: Path) -> None:
    """iSulad's enable-cdi defaults to false; with both runtimes' files present neither is
    known to be the one that runs."""
    containerd, isulad = tmp_path / "config.toml", tmp_path / "daemon.json"
    isulad.write_text('{"log-level": "ERROR"}')
    assert from_configs(containerd, isulad).refused
    isulad.write_text('{"enable-cdi": true}')
    assert from_configs(containerd, isulad).applies is True
    containerd.write_bytes(OFF_17)
    assert from_configs(containerd, isulad).applies is None


def test_a_chosen_file_is_read_as_its_format_says(tmp_path: Path) -> None:
    assert config_paths(tmp_path / "daemon.json") == (None, tmp_path / "daemon.json")
    assert config_paths(tmp_path / "c.toml") == (tmp_path / "c.toml", None)
    assert config_paths(None) == (
        Path("/etc/containerd/config.toml"),
        Path("/etc/isulad/daemon.json"),
    )


def test_cdi_on_with_cdi_off_in_the_runtime_answers_device_nodes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """containerd 1.7 with enable_cdi = false would start the container without CDI devices:
    Allocate names the device node and its mounts instead, and the log says why, once."""
    config = tmp_path / "config.toml"
    config.write_bytes(OFF_17)
    caplog.set_level(logging.INFO, "kae_deviceplugin.deviceplugin.frontend")
    with running_node(cdi=True, runtime_config=config) as node:
        assert node.wait_registered()
        for _ in range(2):
            answer = node.kubelet.allocate(HPRE, ["0000:79:00.0"]).container_responses[0]
            assert list(answer.cdi_devices) == []
            assert [d.container_path for d in answer.devices] == ["/dev/hisi_hpre-2"]
    said = [r.getMessage() for r in caplog.records if "cdi is on but" in r.getMessage()]
    assert len(said) == 1 and "enable_cdi = false" in said[0], said


def test_cdi_on_where_the_runtime_applies_it_answers_cdi_names(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(V3)
    with running_node(cdi=True, runtime_config=config) as node:
        assert node.wait_registered()
        answer = node.kubelet.allocate(HPRE, ["0000:79:00.0"]).container_responses[0]
        assert [c.name for c in answer.cdi_devices] == ["openfuyao.com/kae=0000:79:00.0"]
        assert list(answer.devices) == []
