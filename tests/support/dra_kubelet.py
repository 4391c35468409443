"""The kubelet's side of a DRA driver's service socket, emulated from the kubelet's contract.

What the kubelet (``pkg/kubelet/cm/dra``) does with a driver, restated, not imported from the
driver: it dials the service socket, calls ``NodePrepareResources`` / ``NodeUnprepareResources``
with a 45 s deadline and only claims' namespace, name and UID, and refuses an answer that
leaves out a claim it asked about (it asks again) or names one it did not ask about. It opens
``NodeWatchResources`` once and keeps the latest health of every ``(pool, device)``; a device
not re-sent within its ``health_check_timeout_seconds`` (30 s when zero or less) counts as
Unknown. The version spoken is the service name the driver registered (``v1.DRAPlugin`` ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from kae_deviceplugin._generated.dra.v1 import api_pb2 as dra_v1
from kae_deviceplugin._generated.dra.v1 import api_pb2_grpc as dra_v1_grpc
from kae_deviceplugin._generated.dra.v1beta1 import api_pb2 as dra_v1beta1
from kae_deviceplugin._generated.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from kae_deviceplugin._generated.drahealth.v1 import api_pb2 as health_v1
from kae_deviceplugin._generated.drahealth.v1 import api_pb2_grpc as health_v1_grpc
from kae_deviceplugin._generated.drahealth.v1alpha1 import api_pb2 as health_v1alpha1
from kae_deviceplugin._generated.drahealth.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc
from kae_deviceplugin.kubelet.dial import OWN_CONNECTION, unix_target

CALL_TIMEOUT = 45.0
DEFAULT_HEALTH_TIMEOUT = 30.0
PLUGIN_SERVICES: dict[str, tuple[Any, Any]] = {
    "v1.DRAPlugin": (dra_v1, dra_v1_grpc),
    "v1beta1.DRAPlugin": (dra_v1beta1, dra_v1beta1_grpc),
}
HEALTH_SERVICES: dict[str, tuple[Any, Any]] = {
    "v1.DRAResourceHealth": (health_v1, health_v1_grpc),
    "v1alpha1.DRAResourceHealth": (health_v1alpha1, health_v1alpha1_grpc),
}


class KubeletRefusal(AssertionError):
    """An answer the real kubelet would not accept (a test failure of the driver)."""


@dataclass(frozen=True)
class Claim:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None


@dataclass(frozen=True)
class Prepared:
    """One claim's answer as the kubelet reads it."""

    devices: tuple[PreparedDevice, ...]
    error: str


@dataclass(frozen=True)
class DeviceStatus:
    health: str  # "Healthy", "Unhealthy" or "Unknown", as the pod status spells it
    message: str
    last_updated: int


def _check_keys(asked: Sequence[Claim], got: Sequence[str], call: str) -> None:
    missing = {c.uid for c in asked} - set(got)
    extra = set(got) - {c.uid for c in asked}
    if missing or extra:
        raise KubeletRefusal(f"{call}: left out {sorted(missing)}, not asked {sorted(extra)}")


def _device(pb_device: Any, versioned_share: bool) -> PreparedDevice:
    if not pb_device.pool_name or not pb_device.device_name:
        raise KubeletRefusal(f"a prepared device without pool or name: {pb_device}")
    share = pb_device.share_id if versioned_share and pb_device.HasField("share_id") else None
    return PreparedDevice(
        tuple(pb_device.request_names),
        pb_device.pool_name,
        pb_device.device_name,
        tuple(pb_device.cdi_device_ids),
        share,
    )


class DRAKubelet:
    """Dials ``socket`` and speaks the driver's registered plugin and health services."""

    def __init__(
        self,
        socket: Path,
        *,
        plugin_service: str = "v1.DRAPlugin",
        health_service: str = "v1.DRAResourceHealth",
    ) -> None:
        self.socket = socket
        self.plugin_pb, plugin_grpc = PLUGIN_SERVICES[plugin_service]
        self.health_pb, health_grpc = HEALTH_SERVICES[health_service]
        self._stubs = (plugin_grpc.DRAPluginStub, health_grpc.DRAResourceHealthStub)
        self._channel: grpc.aio.Channel | None = None

    async def __aenter__(self) -> DRAKubelet:
        self._channel = grpc.aio.insecure_channel(
            unix_target(self.socket), options=[OWN_CONNECTION]
        )
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._channel is not None:
            await self._channel.close(None)

    def _stub(self, index: int) -> Any:
        if self._channel is None:
            raise RuntimeError("use DRAKubelet as an async context manager")
        return self._stubs[index](self._channel)

    async def prepare(self, claims: Sequence[Claim]) -> dict[str, Prepared]:
        pb = self.plugin_pb
        request = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
        )
        response = await self._stub(0).NodePrepareResources(request, timeout=CALL_TIMEOUT)
        _check_keys(claims, list(response.claims), "NodePrepareResources")
        with_share = pb is dra_v1
        return {
            uid: Prepared(tuple(_device(d, with_share) for d in answer.devices), answer.error)
            for uid, answer in response.claims.items()
        }

    async def unprepare(self, claims: Sequence[Claim]) -> dict[str, str]:
        pb = self.plugin_pb
        request = pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
        )
        response = await self._stub(0).NodeUnprepareResources(request, timeout=CALL_TIMEOUT)
        _check_keys(claims, list(response.claims), "NodeUnprepareResources")
        return {uid: answer.error for uid, answer in response.claims.items()}

    @contextlib.asynccontextmanager
    async def watch_health(
        self, clock: Callable[[], float] = time.monotonic
    ) -> AsyncIterator[HealthWatch]:
        """The health stream, read in the background while the block runs."""
        watch = HealthWatch(self.health_pb, clock)
        call = self._stub(1).NodeWatchResources(self.health_pb.NodeWatchResourcesRequest())
        reader = asyncio.create_task(watch.read(call))
        try:
            yield watch
        finally:
            call.cancel()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader


class HealthWatch:
    """What the kubelet knows from one NodeWatchResources stream."""

    def __init__(self, pb: Any, clock: Callable[[], float]) -> None:
        self.pb = pb
        self.clock = clock
        self.messages = 0
        self.ended: BaseException | None = None
        self._seen: dict[tuple[str, str], tuple[DeviceStatus, float, float]] = {}
        self._changed = asyncio.Condition()

    async def read(self, call: Any) -> None:
        names = {self.pb.HEALTHY: "Healthy", self.pb.UNHEALTHY: "Unhealthy"}
        try:
            async for message in call:
                for d in message.devices:
                    key = (d.device.pool_name, d.device.device_name)
                    status = DeviceStatus(
                        names.get(d.health, "Unknown"), d.message, d.last_updated_time
                    )
                    timeout = d.health_check_timeout_seconds
                    limit = float(timeout) if timeout > 0 else DEFAULT_HEALTH_TIMEOUT
                    self._seen[key] = (status, self.clock(), limit)
                async with self._changed:
                    self.messages += 1
                    self._changed.notify_all()
        except grpc.aio.AioRpcError as err:
            self.ended = err
        async with self._changed:
            self._changed.notify_all()

    def state(self) -> dict[tuple[str, str], DeviceStatus]:
        """Each device's health now; Unknown once its report is older than its timeout."""
        now = self.clock()
        return {
            key: status if now - seen <= limit else DeviceStatus("Unknown", "", status.last_updated)
            for key, (status, seen, limit) in self._seen.items()
        }

    async def wait_for_messages(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` messages arrived in all, at most ``timeout`` seconds."""
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: self.messages >= count or bool(self.ended))
        except TimeoutError:
            return False
        return self.messages >= count
