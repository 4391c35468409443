"""The kubelet's DRAResourceHealth service, v1 (kubelet 1.37+) and v1alpha1 (1.34 to 1.39).

NodeWatchResources streams the complete device list with each device's health: at once, on
every new inventory, and at least every ``interval`` seconds with nothing new, because the
kubelet turns a device it has not heard about within its timeout (30 s by default) into
Unknown. The default interval is half that, so one late message never flips a device. Every
device discovery sees is listed, published in a slice or not, under its name in the node's
pool; an unhealthy one's message starts with its reasons (``isolated``, ``engine-stopped``,
``dev-node-missing``, ``driver-unbound`` and the rest of core/health.py's codes) and says what
an operator can do. The kubelet shows this in the pod's ``allocatedResourcesStatus``; it does
not steer scheduling (slice taints do).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import grpc

from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.health import REASON_FIXES
from kae_deviceplugin.core.model import Inventory, UacceDevice
from kae_deviceplugin.dra.api import (
    health_v1,
    health_v1_grpc,
    health_v1alpha1,
    health_v1alpha1_grpc,
)
from kae_deviceplugin.dra.slice_devices import device_name

RESEND_INTERVAL = 15.0
MAX_MESSAGE = 1024  # the kubelet cuts longer messages


def health_message(device: UacceDevice) -> str:
    """Empty for a healthy device; else its reasons, then what to do about each."""
    if device.healthy:
        return ""
    fixes = "; ".join(f"{r}: {REASON_FIXES[r]}" for r in device.reasons if r in REASON_FIXES)
    text = ", ".join(device.reasons) + (f" ({fixes})" if fixes else "")
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def health_response(
    pb: Any, inventory: Inventory, pool: str, now: int, timeout_seconds: int = 0
) -> Any:
    """The NodeWatchResourcesResponse of module ``pb`` listing every device of ``inventory``."""
    return pb.NodeWatchResourcesResponse(
        devices=[
            pb.DeviceHealth(
                device=pb.DeviceIdentifier(pool_name=pool, device_name=device_name(d)),
                health=pb.HEALTHY if d.healthy else pb.UNHEALTHY,
                last_updated_time=now,
                health_check_timeout_seconds=timeout_seconds,
                message=health_message(d),
            )
            for d in inventory
        ]
    )


async def inventories_with_ticks(
    latest: LatestValue[Inventory], interval: float
) -> AsyncGenerator[Inventory, None]:
    """The current inventory at once, then each newer one, and the current one again whenever
    ``interval`` seconds pass without a newer one."""
    updates = latest.updates()
    pending: asyncio.Future[tuple[int, Inventory]] = asyncio.ensure_future(anext(updates))
    try:
        while True:
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if done:
                _, inventory = pending.result()
                pending = asyncio.ensure_future(anext(updates))
            else:
                inventory = latest.value
            yield inventory
    finally:
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await pending
        if isinstance(updates, AsyncGenerator):  # it is one; the broadcast only promises less
            await updates.aclose()


class _Health:
    def __init__(
        self,
        pb: Any,
        latest: LatestValue[Inventory],
        pool: str,
        *,
        interval: float = RESEND_INTERVAL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pb = pb
        self.latest = latest
        self.pool = pool
        self.interval = interval
        self.clock = clock

    async def stream(self) -> AsyncGenerator[Any, None]:
        # aclosing: a stream the kubelet cancels must not leave the pending wait behind.
        ticks = inventories_with_ticks(self.latest, self.interval)
        async with contextlib.aclosing(ticks):
            async for inventory in ticks:
                yield health_response(self.pb, inventory, self.pool, int(self.clock()))


class HealthV1(health_v1_grpc.DRAResourceHealthServicer):
    """``v1.DRAResourceHealth``."""

    def __init__(self, latest: LatestValue[Inventory], pool: str, **options: Any) -> None:
        self.health = _Health(health_v1, latest, pool, **options)

    async def NodeWatchResources(
        self,
        request: health_v1.NodeWatchResourcesRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[health_v1.NodeWatchResourcesResponse]:
        stream = self.health.stream()
        async with contextlib.aclosing(stream):
            async for message in stream:
                yield message


class HealthV1alpha1(health_v1alpha1_grpc.DRAResourceHealthServicer):
    """``v1alpha1.DRAResourceHealth``: the same messages in another package."""

    def __init__(self, latest: LatestValue[Inventory], pool: str, **options: Any) -> None:
        self.health = _Health(health_v1alpha1, latest, pool, **options)

    async def NodeWatchResources(
        self,
        request: health_v1alpha1.NodeWatchResourcesRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[health_v1alpha1.NodeWatchResourcesResponse]:
        stream = self.health.stream()
        async with contextlib.aclosing(stream):
            async for message in stream:
                yield message


def add_health_servicers(
    server: grpc.aio.Server,
    latest: LatestValue[Inventory],
    pool: str,
    *,
    interval: float = RESEND_INTERVAL,
    clock: Callable[[], float] = time.time,
) -> None:
    """Serve both DRAResourceHealth versions on ``server``."""
    health_v1_grpc.add_DRAResourceHealthServicer_to_server(
        HealthV1(latest, pool, interval=interval, clock=clock), server
    )
    health_v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(
        HealthV1alpha1(latest, pool, interval=interval, clock=clock), server
    )
