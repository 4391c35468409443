"""The DRA front end's wiring of the devices device-plugin pods hold (issue 27): its own tasks
against the emulated kubelet's pod-resources over a real socket and the in-memory API server;
the first slices already carry the held taint, prepare refuses a claim on a held device, and
the taint is lifted when the pod ends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from kae_deviceplugin.apiserver.seam import NODES, RESOURCE_CLAIMS, RESOURCE_SLICES
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.dra.frontend import DraFrontEnd, device_options
from kae_deviceplugin.dra.slice_devices import DeviceOptions
from kae_deviceplugin.testing.podresources_emulator import PodResourcesEmulator
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.dra.inventories import tree_inventory
from tests.support.dra_claims import Result, claim_object
from tests.support.fake_apiserver import FakeApiServer
from tests.support.harness import short_tmpdir

HPRE = "openfuyao.com/kae.hpre"
HPRE_0 = "hpre-0000-79-00-0"
POOL = "worker-1"
HELD_KEY = "kae.openfuyao.com/held-by-device-plugin"
DEADLINE = 10.0


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(DEADLINE):
        while not condition():
            await asyncio.sleep(0.01)


def test_the_settings_pass_the_held_devices_through() -> None:
    """The front end's options carry what it holds, beside the settings' choices."""
    options = device_options(Settings(unhealthy_taint_effect="omit"), held={HPRE_0: "a/b"})
    assert options == DeviceOptions(taint_effect=None, held={HPRE_0: "a/b"})


def _front(root: Path, socket: Path, api: FakeApiServer) -> DraFrontEnd:
    TREES["kunpeng920-2p"].build(root / "tree")
    settings = Settings(
        sysfs_root=root / "tree" / "sys",
        kubelet_root=root / "kubelet",
        cdi_dir=root / "cdi",
        pod_resources_socket=socket,
        unhealthy_taint_effect="NoSchedule",
    )
    front = DraFrontEnd(settings, api, POOL, ContainerFiles())
    front.held.poll.interval, front.held.poll.settle = 0.02, 0.0
    inventory = tree_inventory(root / "tree")
    front.inventory = inventory
    front.inventories.publish(inventory)
    return front


def _held_taints(api: FakeApiServer) -> dict[str, str]:
    return {
        device["name"]: taint["value"]
        for obj in api.objects.values()
        if obj.get("kind") == "ResourceSlice"
        for device in obj["spec"]["devices"]
        for taint in device.get("taints", [])
        if taint["key"] == HELD_KEY
    }


def test_the_front_end_publishes_the_held_taint_until_the_pod_ends() -> None:
    """The DRA front end's own tasks: the first slices already carry the held taint (the
    publisher waits for the kubelet's first answer), prepare refuses a claim on the held device,
    and the pod gone, the taint is lifted in the API."""
    api = FakeApiServer()
    with short_tmpdir() as root, PodResourcesEmulator(root / "pr.sock") as kubelet:
        kubelet.set_pods([("shop", "tls-a", "main", HPRE, ["0000:79:00.0"])])
        front = _front(root, kubelet.socket_path, api)

        async def main() -> None:
            await api.create(NODES, {"metadata": {"name": POOL}})
            claim = await api.create(
                RESOURCE_CLAIMS, claim_object("team-a", "c", [Result("r", HPRE_0, POOL)])
            )
            tasks = [asyncio.create_task(t) for t in (front._publish(), front.held.run())]
            try:
                await until(lambda: front.publisher.generation > 0)
                assert _held_taints(api) == {HPRE_0: "shop.tls-a"}
                ref = ClaimRef("team-a", "c", claim["metadata"]["uid"])
                [answer] = (await front.preparer.prepare([ref])).values()
                assert "held by device-plugin pod shop/tls-a" in answer.error
                kubelet.set_pods([])
                await until(lambda: not _held_taints(api))
                slices = await api.list(RESOURCE_SLICES, {"spec.nodeName": POOL})
                assert sum(len(s["spec"]["devices"]) for s in slices) == 6
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run(main())
