"""Allocate against an empty unary RPC on the same socket, calls interleaved to share the noise.

GetDevicePluginOptions does no work at all, so it measures what any call costs here (gRPC,
unix socket, both event loops, scheduling); the ratio is what Allocate adds on top.
"""

from __future__ import annotations

import time

import grpc
from bench_core import Figure, median, p99
from bench_node import ServedNode

from kae_deviceplugin.api import pb, pb_grpc
from kae_deviceplugin.deviceplugin.servicer import socket_name

TARGET = 1.3
WARMUP = 50


def interleaved(
    stub: pb_grpc.DevicePluginStub, allocate: pb.AllocateRequest, calls: int
) -> tuple[list[float], list[float]]:
    """Seconds of ``calls`` Allocates and as many empty RPCs, after a warm-up."""
    empty = pb.Empty()

    def timed_allocate() -> float:
        started = time.perf_counter()
        stub.Allocate(allocate, timeout=10)
        return time.perf_counter() - started

    def timed_empty() -> float:
        started = time.perf_counter()
        stub.GetDevicePluginOptions(empty, timeout=10)
        return time.perf_counter() - started

    for _ in range(WARMUP):
        timed_allocate()
        timed_empty()
    allocs: list[float] = []
    empties: list[float] = []
    for i in range(calls):
        # Alternating the order cancels any cost of going first after the other call.
        if i % 2:
            allocs.append(timed_allocate())
            empties.append(timed_empty())
        else:
            empties.append(timed_empty())
            allocs.append(timed_allocate())
    return allocs, empties


def allocate_vs_empty(node: ServedNode, calls: int) -> list[Figure]:
    """``calls`` Allocates and as many empty RPCs, alternating which goes first."""
    device = next(d for d in node.inventory.devices if d.healthy)
    socket = node.plugin_dir / socket_name(device.resource)
    allocate = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=[device.pci_address])]
    )
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        allocs, empties = interleaved(pb_grpc.DevicePluginStub(channel), allocate, calls)
    allocs_ms = [x * 1000 for x in allocs]
    empties_ms = [x * 1000 for x in empties]
    alloc_p50, alloc_p99 = median(allocs_ms), p99(allocs_ms)
    empty_p50, empty_p99 = median(empties_ms), p99(empties_ms)
    p50_ratio, p99_ratio = alloc_p50 / empty_p50, alloc_p99 / empty_p99
    return [
        Figure(
            key="allocate_p50",
            label=f"Allocate p50 ({calls:,} calls)",
            unit="ms",
            median=alloc_p50,
            p99=alloc_p99,
            ratio=p50_ratio,
            reference=f"empty RPC p50 {empty_p50:.3f} ms",
            target=f"<= {TARGET}x",
            met=p50_ratio <= TARGET,
            samples=allocs_ms,
        ),
        Figure(
            key="allocate_p99",
            label="Allocate p99",
            unit="ms",
            median=None,
            p99=alloc_p99,
            ratio=p99_ratio,
            reference=f"empty RPC p99 {empty_p99:.3f} ms",
            target=f"<= {TARGET}x",
            met=p99_ratio <= TARGET,
        ),
        Figure(
            key="empty_rpc",
            label="empty RPC (GetDevicePluginOptions)",
            unit="ms",
            median=empty_p50,
            p99=empty_p99,
            reference="reference of the Allocate rows",
            samples=empties_ms,
        ),
    ]
