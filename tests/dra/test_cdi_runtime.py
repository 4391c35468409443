"""Whether the node's runtime applies CDI devices, from the Node's runtime version and the
runtime's own config file, as containerd 1.7 / 2, iSulad and CRI-O behave; and the driver's
answer where it does not: an empty pool, every claim refused with the fix, /readyz naming it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kae_deviceplugin.apiserver.seam import NODES, RESOURCE_SLICES, JsonObject
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.container.runtime_cdi import CdiSupport, cdi_support, read_config
from kae_deviceplugin.dra.frontend import DraFrontEnd
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.dra.inventories import tree_inventory
from tests.dra.node import HPRE_0, POOL, Node, add_claim, build_node
from tests.support.dra_claims import Result
from tests.support.fake_apiserver import FakeApiServer

CDI_ON_17 = b"""version = 2
[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
"""
CDI_OFF_17 = b"""version = 2
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
"""


@pytest.mark.parametrize(
    ("version", "config", "applies"),
    [
        ("containerd://2.4.2", None, True),
        ("containerd://v2.0.0", None, True),
        ("containerd://1.7.35", CDI_ON_17, True),
        ("containerd://1.7.35", CDI_OFF_17, False),  # its default: enable_cdi = false
        ("containerd://1.7.35", None, False),  # no config file: the defaults
        ("containerd://1.7.35", b"not = [toml", False),
        ("containerd://1.6.20", CDI_ON_17, False),  # no CDI before 1.7
        ("cri-o://1.30.1", None, True),
        ("docker://27.1.0", None, None),
        ("", None, None),
    ],
)
def test_the_runtime_and_its_setting_decide(
    version: str, config: bytes | None, applies: bool | None
) -> None:
    """Each runtime version and config as the runtime itself reads it."""
    assert cdi_support(version, containerd_config=config).applies is applies


def test_isulad_applies_cdi_only_when_its_daemon_json_says_so() -> None:
    """iSulad: `"enable-cdi": true` in daemon.json; false, absent or a damaged file: not."""
    assert cdi_support("iSulad://2.1.5", isulad_config=b'{"enable-cdi": true}').applies
    for config in (b'{"enable-cdi": false}', None, b"{"):
        assert cdi_support("iSulad://2.1.5", isulad_config=config).refused


def test_a_refusal_names_the_runtime_the_setting_the_file_and_the_other_mode() -> None:
    """The reason is the fix: the runtime and version, the key and where it goes, the file
    (marked absent when it is), and device-plugin mode as the way out."""
    reason = cdi_support("containerd://1.7.35", containerd_config=None).reason
    assert "containerd 1.7.35" in reason and "enable_cdi = true" in reason
    assert '[plugins."io.containerd.grpc.v1.cri"]' in reason
    assert "/etc/containerd/config.toml (absent)" in reason and "device-plugin mode" in reason


def test_read_config_tells_absent_from_unreadable(tmp_path: Path) -> None:
    """An absent file is None (the runtime's defaults); a directory in its place raises."""
    assert read_config(tmp_path / "config.toml") is None
    (tmp_path / "config.toml").write_bytes(CDI_ON_17)
    assert read_config(tmp_path / "config.toml") == CDI_ON_17
    with pytest.raises(OSError):
        read_config(tmp_path)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    built = build_node(tmp_path)
    (tmp_path / "plugin").mkdir()
    return built


def test_with_cdi_off_every_claim_is_refused_with_the_fix(node: Node) -> None:
    """The preparer told the runtime applies no CDI: a claim is answered with the reason and
    nothing is written for it."""
    off = cdi_support("containerd://1.7.35", containerd_config=CDI_OFF_17)
    preparer = node.preparer()
    preparer.specs.refusal = lambda: off.reason
    claim = add_claim(node, "c1", Result("hpre", HPRE_0, POOL))
    answer = asyncio.run(preparer.prepare([claim]))[claim.uid]
    assert "enable_cdi = true" in answer.error and not answer.devices
    assert not node.spec_path(claim.uid).exists()
    assert node.checkpoint.load().claims == {}


def test_cdi_support_defaults_to_not_known() -> None:
    """Until the Node is read nothing is refused."""
    assert not CdiSupport(None, "not known yet").refused


def _front(tmp_path: Path, runtime: str, config: bytes | None) -> tuple[DraFrontEnd, FakeApiServer]:
    TREES["kunpeng920-2p"].build(tmp_path / "tree")
    settings = Settings(
        sysfs_root=tmp_path / "tree" / "sys",
        kubelet_root=tmp_path / "kubelet",
        cdi_dir=tmp_path / "cdi",
    )
    api = FakeApiServer()
    api.objects[(NODES.plural, None, "worker-1")] = {
        "metadata": {"name": "worker-1", "uid": "u-1", "resourceVersion": "1"},
        "status": {"nodeInfo": {"containerRuntimeVersion": runtime}},
    }
    front = DraFrontEnd(settings, api, "worker-1", ContainerFiles())
    containerd = tmp_path / "containerd.toml"
    if config is not None:
        containerd.write_bytes(config)
    front.runtime_configs = (containerd, tmp_path / "daemon.json")
    return front, api


async def _published(front: DraFrontEnd, api: FakeApiServer) -> list[JsonObject]:
    inventory = tree_inventory(front.settings.sysfs_root.parent)
    front.inventories.publish(inventory)
    task = asyncio.create_task(front.publishing.run(front.inventories))
    try:
        async with asyncio.timeout(10):
            while not [k for k in api.objects if k[0] == RESOURCE_SLICES.plural]:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return [o for k, o in api.objects.items() if k[0] == RESOURCE_SLICES.plural]


@pytest.mark.parametrize(("config", "devices"), [(CDI_OFF_17, 0), (CDI_ON_17, 6)])
def test_the_front_end_offers_nothing_where_the_runtime_applies_no_cdi(
    tmp_path: Path, config: bytes, devices: int
) -> None:
    """A Node running containerd 1.7.35: with CDI off the pool is published empty (the
    driver runs, has nothing to offer) and /readyz names the fix; with CDI on, all 6 devices."""
    front, api = _front(tmp_path, "containerd://1.7.35", config)
    [pool] = asyncio.run(_published(front, api))
    assert len(pool["spec"]["devices"]) == devices
    reasons = [r for r in front.not_ready() if "CDI" in r]
    assert bool(reasons) == (devices == 0)
    if reasons:
        assert str(tmp_path / "containerd.toml") in reasons[0]
