"""Devices device-plugin pods hold, in DRA mode (issue 27): read from pod-resources, published
with the held taint (or left out where slices carry no taints), refused at prepare, and freed
when the pod ends; the front end's slices follow the emulated kubelet over a real socket."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]  # ships no type information
import pytest

from kae_deviceplugin._generated.podresources.v1 import api_pb2
from kae_deviceplugin.core.model import Health, Inventory
from kae_deviceplugin.dra.held_devices import (
    DevicePluginHolds,
    device_plugin_holders,
    refuse_held,
)
from kae_deviceplugin.dra.slice_devices import DeviceOptions
from kae_deviceplugin.dra.slices import NodeRef, build_slices, devices_per_slice
from kae_deviceplugin.errors import ClaimRefused
from kae_deviceplugin.testing.podresources_emulator import PodResourcesEmulator, pod_resources
from tests.dra.inventories import LABEL_VALUE, fixture_inventory
from tests.support.dra_claims import Result, claim_object
from tests.support.harness import short_tmpdir

HPRE, SEC = "openfuyao.com/kae.hpre", "openfuyao.com/kae.sec"
HPRE_0, HPRE_1 = "hpre-0000-79-00-0", "hpre-0000-b9-00-0"
SEC_0 = "sec-0000-76-00-0"
POOL = "worker-1"
NODE = NodeRef(POOL, "6f1c2d1e-0000-4000-8000-000000000001")
HELD_KEY = "kae.openfuyao.com/held-by-device-plugin"
DEADLINE = 10.0


def _response(
    *assignments: tuple[str, str, str, str, list[str]],
) -> api_pb2.ListPodResourcesResponse:
    return api_pb2.ListPodResourcesResponse(pod_resources=pod_resources(assignments))


def _devices(inventory: Inventory, options: DeviceOptions) -> dict[str, dict[str, Any]]:
    queues = {d.pci_address: 64 for d in inventory}
    plan = build_slices(inventory, NODE, generation=1, queues=queues, options=options)
    return {d["name"]: d for s in plan.slices for d in s["spec"]["devices"]}


def test_holders_are_named_per_device_whatever_the_share() -> None:
    """Shares ``<pci>::<k>`` of one device are one held device, named as the pool names it;
    with several holders the first in order names it; other resources are not ours."""
    held = device_plugin_holders(
        _response(
            ("shop", "tls-b", "main", HPRE, ["0000:79:00.0::1"]),
            ("shop", "tls-a", "main", HPRE, ["0000:79:00.0::0"]),
            ("batch", "zipper", "w", SEC, ["0000:76:00.0"]),
            ("batch", "gpu", "w", "example.com/gpu", ["0000:79:00.0"]),
        )
    )
    assert held == {HPRE_0: "shop/tls-a", SEC_0: "batch/zipper"}


def test_a_held_device_is_published_with_the_held_taint() -> None:
    """NoSchedule whatever the unhealthy effect, the holder as a label value; an unhealthy
    held device carries both taints; the slice passes the 1.37 schema, 64 devices a slice."""
    inventory = fixture_inventory("faults")
    held = {HPRE_0: "shop/tls-a", SEC_0: "team/" + "x" * 80}
    options = DeviceOptions(taint_effect="NoExecute", held=held)
    devices = _devices(inventory, options)
    assert devices[HPRE_0]["taints"] == [
        {"key": "kae.openfuyao.com/unhealthy", "value": "engine-stopped", "effect": "NoExecute"},
        {"key": HELD_KEY, "value": "shop.tls-a", "effect": "NoSchedule"},
    ]
    long_value = devices[SEC_0]["taints"][-1]["value"]
    assert len(long_value) == 63 and LABEL_VALUE.fullmatch(long_value)
    assert all(
        t["key"] != HELD_KEY
        for n, d in devices.items()
        if n not in held
        for t in d.get("taints", [])
    )
    assert devices_per_slice(options) == 64
    for obj in build_slices(inventory, NODE, generation=1, queues={}, options=options).slices:
        kubernetes_validate.validate(obj, "1.37", strict=True)


def test_without_taints_a_held_device_is_left_out() -> None:
    """taint_effect None (``omit``): the held device is not published at all, the rest are."""
    inventory = fixture_inventory("kunpeng920-2p")
    devices = _devices(inventory, DeviceOptions(held={HPRE_0: "shop/tls-a"}))
    assert HPRE_0 not in devices and len(devices) == len(inventory) - 1
    assert all("taints" not in d for d in devices.values())
    assert set(_devices(inventory, DeviceOptions())) == {*devices, HPRE_0}


def test_a_claim_given_a_held_device_is_refused_with_the_holder() -> None:
    """Our driver, our pool, a held device: refused, naming device, holder and taint. Another
    pool, another driver or a free device: not this check's business."""
    held = {HPRE_0: "shop/tls-a"}
    claim = claim_object("team-a", "c", [Result("r", HPRE_0, POOL)])
    with pytest.raises(ClaimRefused) as refused:
        refuse_held(claim, POOL, held)
    text = str(refused.value)
    assert "team-a/c" in text and HPRE_0 in text and "shop/tls-a" in text and HELD_KEY in text
    for results in (
        [Result("r", HPRE_0, "worker-2")],
        [Result("r", HPRE_0, POOL, driver="gpu.example.com")],
        [Result("r", HPRE_1, POOL)],
    ):
        refuse_held(claim_object("team-a", "c", results), POOL, held)
    refuse_held(claim_object("team-a", "c", None), POOL, held)  # unallocated: prepare says so


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(DEADLINE):
        while not condition():
            await asyncio.sleep(0.01)


def test_the_holds_follow_the_kubelet_and_guard_prepare(caplog: pytest.LogCaptureFixture) -> None:
    """Against the emulated kubelet: a pod's device is held (on_change called, one warning),
    the guarded claim read refuses a claim on it; the pod gone, the device is free (one info)
    and the same claim reads through."""
    claim = claim_object("team-a", "c", [Result("r", HPRE_0, POOL)])
    changes: list[dict[str, str]] = []

    async def get_claim(namespace: str, name: str) -> dict[str, Any]:
        return claim

    with short_tmpdir() as root, PodResourcesEmulator(root / "kubelet.sock") as kubelet:
        kubelet.set_pods([("shop", "tls-a", "main", HPRE, ["0000:79:00.0"])])
        holds = DevicePluginHolds(
            kubelet.socket_path,
            POOL,
            lambda: changes.append(dict(holds.held)),
            interval=0.02,
            settle=0.0,  # the emulator's socket is new: no kubelet start to wait out
        )
        guarded = holds.guard(get_claim)

        async def main() -> None:
            task = asyncio.create_task(holds.run())
            try:
                assert await holds.settled()
                await until(lambda: len(changes) == 1)
                with pytest.raises(ClaimRefused, match="held by device-plugin pod shop/tls-a"):
                    await guarded("team-a", "c")
                kubelet.set_pods([])
                await until(lambda: len(changes) == 2)
                assert await guarded("team-a", "c") is claim
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

        with caplog.at_level(logging.INFO, "kae_deviceplugin.dra.held_devices"):
            asyncio.run(main())
    assert changes == [{HPRE_0: "shop/tls-a"}, {}]
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]


def test_an_unhealthy_device_is_still_left_out_when_nothing_is_held() -> None:
    """Held devices change nothing for the others: with ``omit`` an unhealthy one stays out."""
    inventory = fixture_inventory("kunpeng920-2p")
    sick = dataclasses.replace(inventory.devices[0], health=Health.UNHEALTHY, reasons=("x",))
    devices = _devices(Inventory((sick, *inventory.devices[1:])), DeviceOptions(held={}))
    assert len(devices) == len(inventory) - 1
