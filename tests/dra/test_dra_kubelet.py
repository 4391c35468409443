"""The DRA kubelet emulator refuses what the real kubelet refuses."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from kae_deviceplugin._generated.dra.v1 import api_pb2 as pb
from kae_deviceplugin._generated.dra.v1 import api_pb2_grpc as pb_grpc
from tests.dra.serving import socket_dir
from tests.support.dra_kubelet import Claim, DRAKubelet, KubeletRefusal


class _Sloppy(pb_grpc.DRAPluginServicer):
    """A driver that answers one claim too few on prepare and one too many on unprepare."""

    async def NodePrepareResources(
        self, request: pb.NodePrepareResourcesRequest, context: Any
    ) -> pb.NodePrepareResourcesResponse:
        response = pb.NodePrepareResourcesResponse()
        for claim in request.claims[1:]:
            response.claims[claim.uid].error = ""
        return response

    async def NodeUnprepareResources(
        self, request: pb.NodeUnprepareResourcesRequest, context: Any
    ) -> pb.NodeUnprepareResourcesResponse:
        response = pb.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].error = ""
        response.claims["stranger"].error = ""
        return response


@pytest.fixture
def socket() -> Iterator[Path]:
    with socket_dir() as root:
        yield root / "dra.sock"


def test_left_out_and_unasked_claims_are_refused(socket: Path) -> None:
    """A missing entry on prepare and an extra one on unprepare are both KubeletRefusal."""
    claims = [Claim("ns", "a", "u-a"), Claim("ns", "b", "u-b")]

    async def scenario() -> None:
        server = grpc.aio.server()
        pb_grpc.add_DRAPluginServicer_to_server(_Sloppy(), server)
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        try:
            async with DRAKubelet(socket) as kubelet:
                with pytest.raises(KubeletRefusal, match="left out \\['u-a'\\]"):
                    await kubelet.prepare(claims)
                with pytest.raises(KubeletRefusal, match="not asked \\['stranger'\\]"):
                    await kubelet.unprepare(claims)
        finally:
            await server.stop(None)

    asyncio.run(scenario())


def test_an_unserved_version_is_unimplemented(socket: Path) -> None:
    """Speaking v1beta1 to a driver that serves only v1 fails as the kubelet's call would."""

    async def scenario() -> None:
        server = grpc.aio.server()
        pb_grpc.add_DRAPluginServicer_to_server(_Sloppy(), server)
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        try:
            async with DRAKubelet(socket, plugin_service="v1beta1.DRAPlugin") as kubelet:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await kubelet.prepare([Claim("ns", "a", "u-a")])
            assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED
        finally:
            await server.stop(None)

    asyncio.run(scenario())
