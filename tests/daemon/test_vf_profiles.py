"""The VF profile applier against a sysfs that answers as the kernel does (FUSE, see
tests/support/sriov_kernel.py): PFs brought to their profile, drain-safe, refusals in one line.

``serve`` stands for the front end's reconcile: what it is handed is what the kubelet (or the
slices) would serve. Holders are given by the test, except where pod-resources is the subject.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from kae_deviceplugin.config.settings import EngineSettings, Settings
from kae_deviceplugin.core.model import Function, Inventory
from kae_deviceplugin.core.vf_plan import Holders
from kae_deviceplugin.core.views import VfProfile
from kae_deviceplugin.daemon.vf_holders import pod_resources_holders
from kae_deviceplugin.daemon.vf_profiles import VfProfiles, sysfs_writer
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.podresources_emulator import PodResourcesEmulator
from kae_deviceplugin.testing.sysfs_builder import DeviceSpec
from kae_deviceplugin.testing.sysfs_trees import kunpeng_pf, one_socket, two_socket, vf_of, with_vfs
from tests.support.harness import short_tmpdir
from tests.support.sriov_kernel import NEEDS_FUSE, SriovKernel

pytestmark = NEEDS_FUSE
SEC0, SEC1 = "0000:76:00.0", "0000:b6:00.0"


@dataclasses.dataclass
class Node:
    kernel: SriovKernel
    root: Path  # the mount: sys/ and dev/
    served: list[Inventory] = dataclasses.field(default_factory=list)
    holders: Holders | None = dataclasses.field(default_factory=dict)
    ask_count: int = 0

    def inventory(self) -> Inventory:
        return scan(self.root / "sys", self.root / "dev")

    async def serve(self, inventory: Inventory, settings: Settings) -> None:
        self.served.append(inventory)

    async def ask(self, inventory: Inventory) -> Holders | None:
        self.ask_count += 1
        return self.holders

    def profiles(self, writer: object = None) -> VfProfiles:
        return VfProfiles(self.root / "sys", self.ask, writer)  # type: ignore[arg-type]

    def vfs_served(self, pf: str, index: int = -1) -> list[str]:
        return sorted(d.pci_address for d in self.served[index] if d.parent_pf == pf)


@contextmanager
def make_node(specs: Sequence[DeviceSpec]) -> Iterator[Node]:
    """The tree of ``specs`` served over FUSE in a temporary directory."""
    with short_tmpdir() as tmp:
        kernel = SriovKernel(tmp / "backing", specs)
        with kernel.mounted(tmp / "mnt") as root:
            yield Node(kernel, root)


@pytest.fixture
def node() -> Iterator[Node]:
    with make_node(two_socket()) as made:
        yield made


def settings(**vfs: VfProfile) -> Settings:
    return Settings(engines={name: EngineSettings(vfs=count) for name, count in vfs.items()})


def run(profiles: VfProfiles, node: Node, config: Settings) -> bool:
    return asyncio.run(profiles.reconcile(node.inventory(), config, node.serve))


def test_unset_profiles_change_nothing(node: Node) -> None:
    """No engine has vfs: the inventory is served as it is, nothing is written, nobody asked."""
    assert run(node.profiles(), node, Settings()) is False
    assert node.kernel.writes == [] and node.ask_count == 0
    assert node.served == [node.inventory()]


def test_a_profile_is_applied_where_no_vf_exists(node: Node) -> None:
    """sec: 4 on a node without VFs: both SEC PFs get 4 VFs inside the write, no kubelet ask
    (nothing to remove), and the next scan sees them with the kernel's queue split."""
    profiles = node.profiles()
    assert run(profiles, node, settings(sec=4)) is True
    assert sorted(node.kernel.writes) == [(SEC0, "4", 0), (SEC1, "4", 0)]
    assert node.ask_count == 0
    vfs = [d for d in node.inventory() if d.parent_pf == SEC0]
    assert [d.available_instances for d in vfs] == [192, 192, 192, 192]
    assert run(profiles, node, settings(sec=4)) is False  # done: nothing more to write
    assert {c.state for c in profiles.changes} == {"done"}


def test_a_change_between_counts_goes_through_zero_with_the_vfs_out_of_service() -> None:
    """2 -> 4 VFs: the VFs are withheld from the front end first, then 0 and 4 are written."""
    with make_node(with_vfs(one_socket(), [2, 0, 0])) as node:
        served_at_write: list[list[str]] = []
        write = sysfs_writer(node.root / "sys")

        def watching(pf: str, count: int, node: Node = node) -> None:
            served_at_write.append(node.vfs_served(pf))
            write(pf, count)

        profiles = node.profiles(watching)
        assert run(profiles, node, settings(sec=4)) is True
        assert node.kernel.writes == [(SEC0, "0", 0), (SEC0, "4", 0)]
        assert served_at_write == [[], []]  # the old VFs were out of service at each write
        assert node.ask_count == 2  # once to plan, once more after withholding
        assert len(node.kernel.vfs_of(SEC0)) == 4


def test_a_pf_whose_vf_a_pod_holds_waits_and_changes_once_the_pod_ends() -> None:
    """A pod holds one VF: no write, the VFs stay served, the change is pending naming the pod;
    once the pod is gone the next due reconcile applies it."""
    with make_node(with_vfs(one_socket(), [2, 0, 0])) as node:
        vf = node.kernel.vfs_of(SEC0)[1]
        vf_address = next(d.pci_address for d in node.inventory() if d.name == vf)
        node.holders = {vf_address: ("pod default/crypto",)}
        now = [100.0]
        profiles = VfProfiles(node.root / "sys", node.ask, clock=lambda: now[0])
        assert run(profiles, node, settings(sec=4)) is False
        assert node.kernel.writes == []
        assert len(node.vfs_served(SEC0)) == 2
        (change,) = profiles.changes
        assert (change.state, change.reason, change.holders) == (
            "pending",
            "held-by-pod",
            ("pod default/crypto",),
        )
        assert "engines.sec.vfs" in change.why and "pod default/crypto" in change.why
        assert not profiles.due()  # paced: not before the backoff's time
        now[0] += 60
        assert profiles.due()
        node.holders = {}
        assert run(profiles, node, settings(sec=4)) is True
        assert [w[1] for w in node.kernel.writes] == ["0", "4"]


def test_queues_open_on_a_vf_block_the_change_without_freezing_any_vf() -> None:
    """A process outside any pod has a queue of the second VF open: pending, and no write of 0
    (which the kernel would refuse after freezing the first VF)."""
    with make_node(with_vfs(one_socket(), [2, 0, 0])) as node:
        names = node.kernel.vfs_of(SEC0)
        node.kernel.open_queues(names[1], 1)
        profiles = node.profiles()
        assert run(profiles, node, settings(sec=0)) is False
        assert node.kernel.writes == []
        (change,) = profiles.changes
        assert change.reason == "queues-open"
        first = node.root / "sys" / "class" / "uacce" / names[0] / "available_instances"
        assert first.read_text() == "384\n"  # not frozen


def test_unknown_holders_keep_the_vfs() -> None:
    """Pod-resources did not answer: the VFs might be held, so nothing is removed."""
    with make_node(with_vfs(one_socket(), [2, 0, 0])) as node:
        node.holders = None
        profiles = node.profiles()
        assert run(profiles, node, settings(sec=0)) is False
        assert node.kernel.writes == []
        assert profiles.changes[0].reason == "holders-unknown"


def test_a_pod_given_a_vf_while_it_was_withheld_keeps_it() -> None:
    """The kubelet gave a VF away between the plan and the withholding: the second ask sees the
    pod, nothing is written, and every VF is served again at once."""
    with make_node(with_vfs(one_socket(), [2, 0, 0])) as node:
        vf_address = sorted(d.pci_address for d in node.inventory() if d.parent_pf == SEC0)[0]
        answers: list[Holders] = [{}, {vf_address: ("pod default/late",)}]

        async def ask(inventory: Inventory) -> Holders | None:
            return answers.pop(0)

        profiles = VfProfiles(node.root / "sys", ask)
        assert run(profiles, node, settings(sec=4)) is False
        assert node.kernel.writes == []
        assert len(node.vfs_served(SEC0, 0)) == 0  # withheld
        assert len(node.vfs_served(SEC0, -1)) == 2  # and served again
        assert profiles.changes[0].reason == "held-by-pod"


def test_a_failed_write_leaves_the_node_serving_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """/sys read-only: EROFS; the node serves what it has, one error line naming the setting,
    not repeated on the next reconcile; the change is pending with reason write-failed."""
    with short_tmpdir() as tmp:
        kernel = SriovKernel(tmp / "backing", one_socket())
        with kernel.mounted(tmp / "mnt", read_only=True) as root:
            node = Node(kernel, root)
            profiles = node.profiles()
            with caplog.at_level(logging.INFO, logger="kae_deviceplugin.daemon.vf_profiles"):
                run(profiles, node, settings(sec=4))
                run(profiles, node, settings(sec=4))
            errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
            assert len(errors) == 1, errors
            assert "engines.sec.vfs" in errors[0] and "EROFS" in errors[0]
            assert profiles.changes[0].reason == "write-failed"
            assert node.served[-1] == node.inventory()


@pytest.mark.parametrize(
    ("specs", "config", "reason", "words"),
    [
        # A VM: the engine's VFs, passed through, without their PF.
        (
            [
                dataclasses.replace(
                    vf_of(kunpeng_pf("hisi_sec2", 0, 0), 0, 1),
                    parent_pf=None,
                    pci_attrs={"device": "0xa256", "sriov_totalvfs": None, "sriov_numvfs": None},
                )
            ],
            settings(sec=4),
            "no-pf",
            "no sec PF",
        ),
        ([kunpeng_pf("hisi_sec2", 0, 0)], settings(zip=2), "no-engine", "no zip engine"),
        (
            [kunpeng_pf("hisi_sec2", 0, 0, pci_attrs={"sriov_totalvfs": "7"})],
            settings(sec=8),
            "above-total",
            "above sriov_totalvfs 7",
        ),
    ],
    ids=["vm", "engine-absent", "above-total"],
)
def test_profiles_that_cannot_work_are_refused_in_one_line(
    specs: list[DeviceSpec],
    config: Settings,
    reason: str,
    words: str,
) -> None:
    """Each refusal names the setting and what to do; nothing is written; the node serves."""
    with make_node(specs) as node:
        profiles = node.profiles()
        assert run(profiles, node, config) is False
        (change,) = profiles.changes
        assert (change.state, change.reason) == ("refused", reason)
        assert change.why.startswith(f"engines.{change.engine}.vfs: ") and words in change.why
        assert node.kernel.writes == [] and node.served == [node.inventory()]


def test_max_is_the_pfs_sriov_totalvfs() -> None:
    """max on a PF whose sriov_totalvfs is 5 makes 5 VFs."""
    specs = [kunpeng_pf("hisi_zip", 0, 0, pci_attrs={"sriov_totalvfs": "5"})]
    with make_node(specs) as node:
        assert run(node.profiles(), node, settings(zip="max")) is True
        assert node.kernel.writes == [("0000:75:00.0", "5", 0)]


def test_holders_come_from_pod_resources_for_both_apis(node: Node) -> None:
    """The kubelet's pod-resources List names the device-plugin pod on a VF; the applier waits."""
    asyncio.run(
        VfProfiles(node.root / "sys", node.ask).reconcile(
            node.inventory(), settings(sec=1), node.serve
        )
    )
    vf = next(d for d in node.inventory() if d.parent_pf == SEC0)
    socket = node.root.parent / "podres.sock"
    with PodResourcesEmulator(socket) as kubelet:
        kubelet.set_pods([("default", "app", "main", "openfuyao.com/kae.sec", [vf.pci_address])])
        profiles = VfProfiles(node.root / "sys", pod_resources_holders(socket))
        run(profiles, node, settings(sec=2))
        held = {c.pf: c for c in profiles.changes}
        assert held[SEC0].holders == ("pod default/app",)
        assert held[SEC1].state == "ready" or held[SEC1].state == "done"
    assert vf.function is Function.VF
    assert errno.EBUSY not in [w[2] for w in node.kernel.writes]


def test_vfs_a_refused_disable_left_frozen_do_not_block_the_change_forever() -> None:
    """A process opens a queue of the third VF between the plan and the write: the kernel
    refuses the disable (EBUSY) and leaves the first two frozen, every queue taken. Once the
    process has ended, those two do not count as in use: the next try goes through 0 to 4."""
    with make_node(with_vfs(one_socket(), [3, 0, 0])) as node:
        names = node.kernel.vfs_of(SEC0)
        write = sysfs_writer(node.root / "sys")
        raced: list[str] = []

        def racing(pf: str, count: int) -> None:
            if not raced:
                node.kernel.open_queues(names[2], 1)
                raced.append(names[2])
            write(pf, count)

        now = [0.0]
        profiles = VfProfiles(node.root / "sys", node.ask, racing, clock=lambda: now[0], grace=0)
        run(profiles, node, settings(sec=4))
        assert node.kernel.writes == [(SEC0, "0", errno.EBUSY)]
        uacce = node.root / "sys" / "class" / "uacce"
        assert [(uacce / n / "available_instances").read_text() for n in names[:2]] == ["0\n"] * 2
        assert profiles.changes[0].reason == "write-failed"
        node.kernel.open_queues(names[2], -1)  # the process ends
        now[0] += 4000  # past the failed write's backoff
        assert profiles.due()
        assert run(profiles, node, settings(sec=4)) is True
        assert node.kernel.writes[1:] == [(SEC0, "0", 0), (SEC0, "4", 0)]
