"""The daemon's own counters and histograms, on a registry it is given (never the global one).

One ``Counters`` per daemon: the daemon creates it (or is handed one, as tests do, to read their
own daemon's figures) and passes it to each part that counts; the HTTP endpoint exposes its
registry with the device gauges computed at scrape time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from kae_deviceplugin import __version__
from kae_deviceplugin.prometheus_lite import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

# A `_created` sample per counter and histogram child doubles their series and says only when the
# process started, which `process_start_time_seconds` already does once. (A process-wide switch of
# prometheus_client, so it is set once, here.)
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated

# The gRPC codes Allocate refuses with (errors.AllocationError), each a series per resource from
# the start, so an error-rate query has something to rate before the first error.
ALLOCATION_ERROR_CODES = ("INVALID_ARGUMENT", "FAILED_PRECONDITION")


class Counters:
    """Every counter and histogram of one daemon, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        Info("kae_build", "Version of the running kae-deviceplugin.", registry=r).info(
            {"version": __version__}
        )
        self._add_kubelet_metrics(r)
        self._add_discovery_metrics(r)
        # Resolving a labelled child takes a lock and a dict lookup; the hot methods skip it.
        self._duration_by_method: dict[str, Callable[[float], None]] = {
            method: self.grpc_duration.labels(method).observe
            for method in ("Allocate", "GetPreferredAllocation")
        }

    def _add_kubelet_metrics(self, r: CollectorRegistry) -> None:
        """What the kubelet asked and how registration went."""
        self.allocations = Counter(
            "kae_allocations",
            "Allocate calls answered successfully, per resource.",
            ["resource"],
            registry=r,
        )
        self.allocation_errors = Counter(
            "kae_allocation_errors",
            "Allocate calls refused, per resource and gRPC status code.",
            ["resource", "code"],
            registry=r,
        )
        self.grpc_duration = Histogram(
            "kae_grpc_request_duration_seconds",
            "Time to answer a unary device-plugin call from the kubelet.",
            ["method"],
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0),
            registry=r,
        )
        self.registrations = Counter(
            "kae_kubelet_registrations",
            "Successful registrations with the kubelet, per resource.",
            ["resource"],
            registry=r,
        )
        self.kubelet_restarts = Counter(
            "kae_kubelet_restarts", "Kubelet restarts the daemon detected.", registry=r
        )

    def _add_discovery_metrics(self, r: CollectorRegistry) -> None:
        """How discovery goes: scan time, uevents, warnings."""
        self.scan_duration = Histogram(
            "kae_scan_duration_seconds",
            "Time one sysfs discovery pass took.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.udev_events = Counter(
            "kae_udev_events", "uacce udev events seen, per action.", ["action"], registry=r
        )
        self.discovery_warnings = Gauge(
            "kae_discovery_warnings",
            "Discovery warnings in effect (skipped class/uacce entries, an unlistable class "
            "directory).",
            registry=r,
        )
        self.discovery_warnings_raised = Counter(
            "kae_discovery_warnings_raised",
            "Discovery warnings that appeared; each is logged once then, and once when it clears.",
            registry=r,
        )

    @contextmanager
    def timed(self, method: str) -> Iterator[None]:
        observe = self._duration_by_method.get(method) or self.grpc_duration.labels(method).observe
        start = time.perf_counter()
        try:
            yield
        finally:
            observe(time.perf_counter() - start)

    def allocated(self, resource: str) -> None:
        self.allocations.labels(resource).inc()

    def allocation_failed(self, resource: str, code: str) -> None:
        self.allocation_errors.labels(resource, code).inc()

    def prime(self, resources: Iterable[str]) -> None:
        """Create, at 0, every per-resource series of the enabled ``resources`` (idempotent)."""
        for resource in resources:
            self.allocations.labels(resource)
            self.registrations.labels(resource)
            for code in ALLOCATION_ERROR_CODES:
                self.allocation_errors.labels(resource, code)

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        """One sample's value (0 where the series does not exist): for tests and doctor."""
        return self.registry.get_sample_value(name, labels or {}) or 0.0
