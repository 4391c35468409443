"""Talking to the kubelet: Register over kubelet.sock, with capped backoff while it is away."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import grpc

from kae_deviceplugin.api import KUBELET_SOCKET, VERSION, pb, pb_grpc, plugin_options
from kae_deviceplugin.errors import RegistrationFailed

log = logging.getLogger(__name__)

REGISTER_TIMEOUT = 15.0  # the kubelet dials back with a 10 s timeout before it answers
BACKOFF_START = 0.05
BACKOFF_CAP = 5.0


async def register_once(device_plugin_dir: Path, endpoint: str, resource: str) -> None:
    """One Register call; raises grpc.aio.AioRpcError or RegistrationFailed."""
    target = f"unix://{device_plugin_dir / KUBELET_SOCKET}"
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.RegistrationStub(channel)
        request = pb.RegisterRequest(
            version=VERSION,
            endpoint=endpoint,
            resource_name=resource,
            options=plugin_options(),
        )
        try:
            await stub.Register(request, timeout=REGISTER_TIMEOUT, wait_for_ready=False)
        except grpc.aio.AioRpcError as err:
            if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            raise RegistrationFailed(f"kubelet refused {resource}: {err.details()}") from err


async def register_until_done(
    device_plugin_dir: Path,
    endpoint: str,
    resource: str,
    on_registered: Callable[[], None] | None = None,
) -> None:
    """Register, retrying with capped exponential backoff; logs once per state change."""
    delay = BACKOFF_START
    last_problem: str | None = None
    while True:
        try:
            await register_once(device_plugin_dir, endpoint, resource)
        except (grpc.aio.AioRpcError, RegistrationFailed) as err:
            problem = (
                f"kubelet not reachable at {device_plugin_dir / KUBELET_SOCKET}"
                if isinstance(err, grpc.aio.AioRpcError)
                else str(err)
            )
            if problem != last_problem:
                log.warning(
                    "%s: %s; retrying with backoff up to %.0f s", resource, problem, BACKOFF_CAP
                )
                last_problem = problem
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_CAP)
            continue
        log.info("%s: registered with the kubelet (endpoint %s)", resource, endpoint)
        if on_registered is not None:
            on_registered()
        return
