"""The floor: the least a Python grpc.aio v1beta1 device plugin can be, to measure ours against.

Three resources, each on its own grpc.aio server and socket, as the daemon serves them; a static
list of ``--devices`` IDs split over them, sent once on ListAndWatch and then never again; an
Allocate that answers one empty container response; registration with the kubelet once; no
sysfs, no health, no metrics, no timers. What it costs at rest is the interpreter, grpc and
protobuf, and three idle servers: the part of our cost no Python plugin can avoid.

    python benchmarks/floor_plugin.py --plugin-dir DIR --devices N

It imports the generated device-plugin modules and nothing else of the package (not even
``kae_deviceplugin.api``), and no module beyond grpc, protobuf and asyncio: its arguments are
read from ``sys.argv`` by hand and its paths are strings. ``argparse`` would cost ~0.9 MiB at
rest (an ArgumentParser loads gettext and locale, and its help formatter shutil, with bz2, lzma
and zlib) and ``pathlib`` ~0.2 MiB more: a floor that loads them is not the minimum, and the
daemon's ratio to it flatters the daemon. SIGTERM stops its servers and it.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Sequence

import grpc

from kae_deviceplugin._generated.deviceplugin.v1beta1 import api_pb2 as pb
from kae_deviceplugin._generated.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

RESOURCES = ("openfuyao.com/kae.hpre", "openfuyao.com/kae.sec", "openfuyao.com/kae.zip")
VERSION = "v1beta1"  # as kae_deviceplugin.api says; not imported from there, see above
KUBELET_SOCKET = "kubelet.sock"
USAGE = "usage: floor_plugin.py --plugin-dir DIR --devices N"


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

    # Never called (the options offer neither), but the generated servicer declares them.
    async def GetPreferredAllocation(
        self,
        request: pb.PreferredAllocationRequest,
        context: grpc.aio.ServicerContext[
            pb.PreferredAllocationRequest, pb.PreferredAllocationResponse
        ],
    ) -> pb.PreferredAllocationResponse:
        return pb.PreferredAllocationResponse()

    async def PreStartContainer(
        self,
        request: pb.PreStartContainerRequest,
        context: grpc.aio.ServicerContext[
            pb.PreStartContainerRequest, pb.PreStartContainerResponse
        ],
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


async def serve(plugin_dir: str, devices: int) -> None:
    servers = []
    for index, resource in enumerate(RESOURCES):
        server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(FloorPlugin(static_ids(devices, index)), server)
        endpoint = f"floor-{resource.rsplit('.', 1)[-1]}.sock"
        server.add_insecure_port(f"unix://{plugin_dir}/{endpoint}")
        await server.start()
        servers.append(server)
        async with grpc.aio.insecure_channel(f"unix://{plugin_dir}/{KUBELET_SOCKET}") as channel:
            request = pb.RegisterRequest(version=VERSION, endpoint=endpoint, resource_name=resource)
            await pb_grpc.RegistrationStub(channel).Register(request, timeout=10)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await asyncio.gather(*(server.stop(0) for server in servers))


def parse(argv: Sequence[str]) -> tuple[str, int]:
    """``--plugin-dir DIR --devices N``, in either order, by hand (see the module's doc)."""
    options = dict(zip(argv[::2], argv[1::2], strict=False))
    if len(argv) != 4 or set(options) != {"--plugin-dir", "--devices"}:
        raise SystemExit(USAGE)
    try:
        return options["--plugin-dir"], int(options["--devices"])
    except ValueError:
        raise SystemExit(USAGE) from None


def main() -> None:
    asyncio.run(serve(*parse(sys.argv[1:])))


if __name__ == "__main__":
    main()
