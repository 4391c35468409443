"""DRA mode: a VF profile waits while a prepared claim holds a VF of the PF (the driver's own
checkpoint), then changes it, and the slices serve the new VFs: the DRA front end against the
in-memory API server, a sysfs that answers as the kernel does (FUSE)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kae_deviceplugin.apiserver.seam import NODES
from kae_deviceplugin.config.settings import EngineSettings, Settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.core.ids import pool_device_name
from kae_deviceplugin.daemon.vf_holders import pod_resources_holders
from kae_deviceplugin.daemon.vf_profiles import VfProfiles, sysfs_writer
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.dra.api import plugin_dir
from kae_deviceplugin.dra.checkpoint import (
    Checkpoint,
    CheckpointFile,
    PreparedClaim,
    PreparedDevice,
)
from kae_deviceplugin.dra.frontend import DraFrontEnd
from kae_deviceplugin.dra.vf_claims import prepared_claims
from kae_deviceplugin.testing.podresources_emulator import PodResourcesEmulator
from kae_deviceplugin.testing.sysfs_trees import one_socket, with_vfs
from tests.support.fake_apiserver import FakeApiServer
from tests.support.harness import short_tmpdir
from tests.support.sriov_kernel import NEEDS_FUSE, SriovKernel

pytestmark = NEEDS_FUSE
POOL = "worker-1"
SEC0 = "0000:76:00.0"
DEADLINE = 20.0


async def until(condition: Callable[[], object]) -> None:
    async with asyncio.timeout(DEADLINE):
        while not condition():
            await asyncio.sleep(0.01)


def test_a_prepared_claim_keeps_the_vfs_then_the_slices_serve_the_new_ones() -> None:
    """sec: 4 where a prepared claim holds one of SEC0's 2 VFs: pending, the slices keep both;
    the claim unprepared, the PF goes through 0 to 4 and the slices list its 4 VFs."""
    api = FakeApiServer()
    with short_tmpdir() as root:
        kernel = SriovKernel(root / "backing", with_vfs(one_socket(), [2, 0, 0]))
        with (
            kernel.mounted(root / "tree") as tree,
            PodResourcesEmulator(root / "pr.sock") as kubelet,
        ):
            kubelet.set_pods([])
            settings = Settings(
                sysfs_root=tree / "sys",
                dev_root=tree / "dev",
                kubelet_root=root / "kubelet",
                cdi_dir=root / "cdi",
                pod_resources_socket=root / "pr.sock",
                engines={"sec": EngineSettings(vfs=4)},
            )
            checkpoint = CheckpointFile(plugin_dir(settings.kubelet_root))
            checkpoint.directory.mkdir(parents=True)
            functions = kernel.backing.glob("sys/bus/pci/devices/*")
            vf0 = sorted(p.resolve().name for p in functions if (p / "physfn").exists())[0]
            device = PreparedDevice("r", POOL, pool_device_name("sec", vf0))
            claim = PreparedClaim("uid-1", "team", "tls", (device,), "spec.json")
            checkpoint.save(Checkpoint().with_claim(claim))
            front = DraFrontEnd(settings, api, POOL, ContainerFiles())
            front.held.poll.interval, front.held.poll.settle = 0.02, 0.0
            now = [0.0]
            holders = pod_resources_holders(
                root / "pr.sock", prepared_claims(settings.kubelet_root)
            )
            served_at_write: list[list[str]] = []
            write = sysfs_writer(settings.sysfs_root)

            def watching(pf: str, count: int) -> None:  # what the slices were told at the write
                served_at_write.append([d.name for d in front.inventory if d.parent_pf == pf])
                write(pf, count)

            profiles = VfProfiles(settings.sysfs_root, holders, watching, clock=lambda: now[0])

            def sec0_vfs() -> set[str]:
                names = {
                    d["name"]
                    for s in api.objects.values()
                    if s.get("kind") == "ResourceSlice"
                    for d in s["spec"]["devices"]
                }
                return {n for n in names if n.startswith("sec-0000-76-00-") and n[-1] != "0"}

            async def main() -> None:
                await api.create(NODES, {"metadata": {"name": POOL}})
                tasks = [asyncio.create_task(t) for t in (front._publish(), front.held.run())]
                try:
                    inventory = scan(settings.sysfs_root, settings.dev_root)
                    assert await profiles.reconcile(inventory, settings, front.reconcile) is False
                    (change,) = [c for c in profiles.changes if c.pf == SEC0]
                    assert (change.reason, change.holders) == ("held-by-pod", ("claim team/tls",))
                    await until(lambda: len(sec0_vfs()) == 2)
                    checkpoint.save(Checkpoint())  # the claim is unprepared
                    now[0] += 60
                    inventory = scan(settings.sysfs_root, settings.dev_root)
                    assert await profiles.reconcile(inventory, settings, front.reconcile) is True
                    inventory = scan(settings.sysfs_root, settings.dev_root)  # the rescan
                    await profiles.reconcile(inventory, settings, front.reconcile)
                    await until(lambda: len(sec0_vfs()) == 4)
                    assert [w[1] for w in kernel.writes] == ["0", "4"]
                    assert served_at_write == [[], []]  # out of the slices' inventory first
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)

            asyncio.run(main())
