"""The floor: the least a Python grpc.aio v1beta1 device plugin can be, to measure ours against.

Three resources, each on its own grpc.aio server and socket, as the daemon serves them; a static
list of ``--devices`` IDs split over them, sent once on ListAndWatch and then never again; an
Allocate that answers one empty container response; registration with the kubelet once; no
sysfs, no health, no metrics, no timers. What it costs at rest is the interpreter, grpc and
protobuf, and three idle servers: the part of our cost no Python plugin can avoid.

    python benchmarks/floor_plugin.py --plugin-dir DIR --devices N

It uses the generated code through ``kae_deviceplugin.api`` only, so it loads the same generated
modules the daemon loads and nothing else of the package. SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from kae_deviceplugin.api import KUBELET_SOCKET, VERSION, pb, pb_grpc

RESOURCES = ("openfuyao.com/kae.hpre", "openfuyao.com/kae.sec", "openfuyao.com/kae.zip")


def static_ids(count: int, index: int) -> list[str]:
    """The ``index``-th resource's share of ``count`` made-up PCI addresses."""
    return [f"0000:{n // 256:02x}:{n % 256:02x}.0" for n in range(index, count, len(RESOURCES))]


class FloorPlugin(pb_grpc.DevicePluginServicer):
    """One resource: a list that never changes."""

    def __init__(self, ids: list[str]) -> None:
        self.response = pb.ListAndWatchResponse(
            devices=[pb.Device(ID=i, health="Healthy") for i in ids]
        )

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[pb.Empty, pb.DevicePluginOptions]
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions()

    async def ListAndWatch(
        self,
        request: pb.Empty,
        context: grpc.aio.ServicerContext[pb.Empty, pb.ListAndWatchResponse],
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        yield self.response
        await asyncio.Event().wait()  # the list never changes: hold the stream open

    async def Allocate(
        self,
        request: pb.AllocateRequest,
        context: grpc.aio.ServicerContext[pb.AllocateRequest, pb.AllocateResponse],
    ) -> pb.AllocateResponse:
        return pb.AllocateResponse(
            container_responses=[pb.ContainerAllocateResponse() for _ in request.container_requests]
        )


async def serve(plugin_dir: Path, devices: int) -> None:
    servers = []
    for index, resource in enumerate(RESOURCES):
        server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(FloorPlugin(static_ids(devices, index)), server)
        endpoint = f"floor-{resource.rsplit('.', 1)[-1]}.sock"
        server.add_insecure_port(f"unix://{plugin_dir / endpoint}")
        await server.start()
        servers.append(server)
        async with grpc.aio.insecure_channel(f"unix://{plugin_dir / KUBELET_SOCKET}") as channel:
            request = pb.RegisterRequest(version=VERSION, endpoint=endpoint, resource_name=resource)
            await pb_grpc.RegistrationStub(channel).Register(request, timeout=10)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await asyncio.gather(*(server.stop(0) for server in servers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugin-dir", type=Path, required=True)
    parser.add_argument("--devices", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.plugin_dir, args.devices))


if __name__ == "__main__":
    main()
