"""The daemon's own counters and histograms, in a registry of its own (not the global one)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from kae_deviceplugin import __version__

# A `_created` sample per counter and histogram child doubles their series and says only when the
# process started, which `process_start_time_seconds` already does once.
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated
REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

BUILD_INFO = Info("kae_build", "Version of the running kae-deviceplugin.", registry=REGISTRY)
BUILD_INFO.info({"version": __version__})

ALLOCATIONS = Counter(
    "kae_allocations",
    "Allocate calls answered successfully, per resource.",
    ["resource"],
    registry=REGISTRY,
)
# The gRPC codes Allocate refuses with (container.allocate.AllocationError), each a series per
# resource from the start, so an error-rate query has something to rate before the first error.
ALLOCATION_ERROR_CODES = ("INVALID_ARGUMENT", "FAILED_PRECONDITION")
ALLOCATION_ERRORS = Counter(
    "kae_allocation_errors",
    "Allocate calls refused, per resource and gRPC status code.",
    ["resource", "code"],
    registry=REGISTRY,
)
GRPC_DURATION = Histogram(
    "kae_grpc_request_duration_seconds",
    "Time to answer a unary device-plugin call from the kubelet.",
    ["method"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0),
    registry=REGISTRY,
)
REGISTRATIONS = Counter(
    "kae_kubelet_registrations",
    "Successful registrations with the kubelet, per resource.",
    ["resource"],
    registry=REGISTRY,
)
KUBELET_RESTARTS = Counter(
    "kae_kubelet_restarts", "Kubelet restarts the daemon detected.", registry=REGISTRY
)
SCAN_DURATION = Histogram(
    "kae_scan_duration_seconds",
    "Time one sysfs discovery pass took.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
    registry=REGISTRY,
)
UDEV_EVENTS = Counter(
    "kae_udev_events", "uacce udev events seen, per action.", ["action"], registry=REGISTRY
)

DISCOVERY_WARNINGS = Gauge(
    "kae_discovery_warnings",
    "Discovery warnings in effect (skipped class/uacce entries, an unlistable class directory).",
    registry=REGISTRY,
)
DISCOVERY_WARNINGS_RAISED = Counter(
    "kae_discovery_warnings_raised",
    "Discovery warnings that appeared; each is logged once then, and once when it clears.",
    registry=REGISTRY,
)


@contextmanager
def timed(method: str) -> Iterator[None]:
    observe = _DURATION_BY_METHOD.get(method) or GRPC_DURATION.labels(method).observe
    start = time.perf_counter()
    try:
        yield
    finally:
        observe(time.perf_counter() - start)


# Resolving a labelled child takes a lock and a dict lookup; the hot methods skip it.
_DURATION_BY_METHOD = {
    method: GRPC_DURATION.labels(method).observe
    for method in ("Allocate", "GetPreferredAllocation")
}


def allocated(resource: str) -> None:
    ALLOCATIONS.labels(resource).inc()


def allocation_failed(resource: str, code: str) -> None:
    ALLOCATION_ERRORS.labels(resource, code).inc()


def prime(resources: Iterable[str]) -> None:
    """Create, at 0, every per-resource series of the enabled ``resources`` (idempotent)."""
    for resource in resources:
        ALLOCATIONS.labels(resource)
        REGISTRATIONS.labels(resource)
        for code in ALLOCATION_ERROR_CODES:
            ALLOCATION_ERRORS.labels(resource, code)
