"""Inside a container, UADK sees exactly the devices the container was allocated."""

from __future__ import annotations

import itertools

import pytest

from tests.support.container_fs import ContainerFS, uadk_usable_devices
from tests.support.harness import Node, running_node

HPRE, SEC, ZIP = (f"openfuyao.com/kae.{e}" for e in ("hpre", "sec", "zip"))


def container(node: Node, requests: list[tuple[str, list[str]]]) -> ContainerFS:
    answers = [node.kubelet.allocate(r, ids).container_responses[0] for r, ids in requests]
    return ContainerFS.from_answers(
        answers,
        node.root,
        {"/sys": node.root / "sys", "/dev": node.root / "dev"},
    )


def test_single_resource_sees_only_its_device() -> None:
    """kae.hpre: 1 -> UADK finds that one HPRE and nothing else, with its NUMA node readable."""
    with running_node("kunpeng920-2p-vfs") as node:
        assert node.wait_registered()
        fs = container(node, [(HPRE, ["0000:b9:00.1"])])
        assert uadk_usable_devices(fs) == {"hisi_hpre-12"}
        assert fs.read("/sys/class/uacce/hisi_hpre-12/device/numa_node").strip() == "2"
        assert fs.read("/sys/class/uacce/hisi_hpre-12/algorithms").split() == ["rsa", "dh"]
        assert not fs.exists("/sys/class/uacce/hisi_hpre-2/algorithms")


@pytest.mark.parametrize("order", list(itertools.permutations([HPRE, SEC, ZIP], 2)))
def test_two_resources_in_either_order_see_one_device_each(order: tuple[str, str]) -> None:
    """kae.hpre: 1 + kae.sec: 1 (any order of Allocate answers) -> one HPRE and one SEC usable."""
    picks = {
        HPRE: ("0000:79:00.0", "hisi_hpre-2"),
        SEC: ("0000:b6:00.0", "hisi_sec2-1"),
        ZIP: ("0000:75:00.1", "hisi_zip-14"),
    }
    with running_node("kunpeng920-2p-vfs") as node:
        assert node.wait_registered()
        fs = container(node, [(r, [picks[r][0]]) for r in order])
        assert uadk_usable_devices(fs) == {picks[r][1] for r in order}
        assert uadk_usable_devices(fs, ["rsa"]) == ({"hisi_hpre-2"} if HPRE in order else set())


def test_shares_give_each_container_its_device() -> None:
    """With 3 shares, two shares of one device in one container mount it once; another
    container holding a share of a different device sees only that one."""
    from kae_deviceplugin.config.settings import EngineSettings, Settings

    engines = dict(Settings().engines)
    engines["zip"] = EngineSettings(shares=3)
    with running_node("kunpeng920-2p", engines=engines) as node:
        assert node.wait_registered()
        assert len(node.view(ZIP)) == 6
        first = container(node, [(ZIP, ["0000:75:00.0::0", "0000:75:00.0::1"])])
        assert uadk_usable_devices(first) == {"hisi_zip-4"}
        second = container(node, [(ZIP, ["0000:b5:00.0::2"])])
        assert uadk_usable_devices(second) == {"hisi_zip-5"}


def test_view_follows_hotplug_and_isolation() -> None:
    """The node-wide view tracks discovery: an isolated device is skipped by UADK in place."""
    from kae_deviceplugin.testing.sysfs_builder import set_attribute

    with running_node(scan_interval=0.1) as node:
        assert node.wait_registered()
        fs = container(node, [(SEC, ["0000:76:00.0"])])
        assert uadk_usable_devices(fs) == {"hisi_sec2-0"}
        set_attribute(node.root, "hisi_sec2-0", "isolate", "1")
        assert uadk_usable_devices(fs) == set()


def test_view_off_mounts_nothing_and_shows_the_trap() -> None:
    """--container-sysfs-view off: no mounts, so UADK sees the host's devices and may pick one
    whose /dev node the container lacks (the trap the view exists to close)."""
    with running_node(container_sysfs_view=False) as node:
        assert node.wait_registered()
        answer = node.kubelet.allocate(HPRE, ["0000:79:00.0"]).container_responses[0]
        assert list(answer.mounts) == []
        assert [d.container_path for d in answer.devices] == ["/dev/hisi_hpre-2"]
        fs = container(node, [(HPRE, ["0000:79:00.0"])])
        with pytest.raises(AssertionError, match="is not in the container"):
            uadk_usable_devices(fs)
