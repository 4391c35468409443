"""Per-device metrics, computed at scrape time from one consistent snapshot of the daemon.

Nothing here is updated as events happen: a scrape turns the current inventory, the advertised
views and the pod-resources answer into gauges, so the numbers can never drift from what the
daemon actually serves. Label values come from sysfs and the kubelet, never from free text, and
reasons come from the fixed codes in :mod:`kae_deviceplugin.core.health`, which bounds cardinality.

Series per device: ``kae_device_info``, ``kae_device_healthy``, ``kae_device_available_queues``
and one ``kae_device_allocated`` per holder (one while free), plus one
``kae_device_unhealthy_reason`` per reason only while that reason holds: a zero for every code
on every healthy device would be most of the exposition and say nothing ``healthy`` does not.
Per device whose queue total is known, in both modes: ``kae_device_queues_in_use``,
``kae_device_queues_claimed`` (granted) and, while held, ``kae_device_holders``
(:mod:`kae_deviceplugin.observability.queue_metrics`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from kae_deviceplugin.core.model import Inventory, QueueBook, UacceDevice
from kae_deviceplugin.core.vf_plan import VfChange
from kae_deviceplugin.core.views import ResourceView
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.discovery.node_facts import NodeFacts
from kae_deviceplugin.discovery.scan import read_available_instances
from kae_deviceplugin.kubelet.podresources import Allocations
from kae_deviceplugin.observability.node_metrics import node_fact_families
from kae_deviceplugin.observability.queue_metrics import queue_families
from kae_deviceplugin.observability.vf_metrics import vf_families
from kae_deviceplugin.prometheus_lite import (
    CollectorRegistry,
    CounterMetricFamily,
    Gauge,
    GaugeMetricFamily,
    Metric,
    choose_encoder,
)

DEVICE_LABELS = ("engine", "device", "pci_address")
HOLDER_LABELS = ("namespace", "pod", "container")
NO_HOLDER = ("", "", "")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one scrape reports; ``allocations`` is None while the pod-resources API is unknown."""

    inventory: Inventory
    views: Mapping[str, ResourceView]
    registered: frozenset[str]
    allocations: Allocations | None
    queue_book: QueueBook | None = None  # queue totals, and DRA's prepared claims
    # What the kubelet must have registered (the DRA driver's name in DRA mode); None: the
    # served resources, the views' names, as in device-plugin mode.
    expected: frozenset[str] | None = None
    api_requests: Mapping[str, int] | None = None  # DRA: requests sent, by verb
    node_facts: NodeFacts | None = None  # issue 37: read off the loop at scrape time
    vf_changes: tuple[VfChange, ...] = ()  # the VF profiles' last plan (vf_metrics.py)


def _ids(device: UacceDevice) -> list[str]:
    return [device.engine, device.name, device.pci_address]


def _shown(value: object) -> str:
    return "" if value is None else str(value)


def inventory_families(
    inventory: Inventory, queues_of: Callable[[UacceDevice], int | None] = read_available_instances
) -> list[Metric]:
    """What the node has: identity, health with its reasons, free queues.

    Free queues are read from sysfs now (``queues_of``), not taken from the inventory: the scan
    loop reads them only at its full passes, and a scrape is when someone wants the figure.
    """
    info = GaugeMetricFamily(
        "kae_device_info",
        "A KAE device of this node (always 1); its attributes are the labels.",
        labels=[*DEVICE_LABELS, "function", "numa_node", "api", "algorithms"],
    )
    healthy = GaugeMetricFamily(
        "kae_device_healthy", "1 if the device is Healthy, else 0.", labels=list(DEVICE_LABELS)
    )
    reasons = GaugeMetricFamily(
        "kae_device_unhealthy_reason",
        "1 for each reason the device is Unhealthy (a fixed set of codes); absent otherwise.",
        labels=[*DEVICE_LABELS, "reason"],
    )
    queues = GaugeMetricFamily(
        "kae_device_available_queues",
        "Free hardware queues (available_instances); absent while unreadable.",
        labels=list(DEVICE_LABELS),
    )
    for device in inventory:
        ids = _ids(device)
        info.add_metric(
            [
                *ids,
                device.function.value,
                _shown(device.numa_node),
                _shown(device.api),
                ",".join(device.algorithms),
            ],
            1,
        )
        healthy.add_metric(ids, 1 if device.healthy else 0)
        for reason in device.reasons:
            reasons.add_metric([*ids, reason], 1)
        free = queues_of(device)
        if free is not None:
            queues.add_metric(ids, free)
    return [info, healthy, reasons, queues, driver_family(inventory)]


def driver_family(inventory: Inventory) -> GaugeMetricFamily:
    """One series per engine and bound driver with its module's version: a few per node."""
    family = GaugeMetricFamily(
        "kae_driver_info",
        'The kernel driver of an engine\'s devices and its module version ("unknown" where the '
        "module shows none); always 1.",
        labels=["engine", "driver", "version"],
    )
    drivers = {(d.engine, d.driver, d.driver_version or "unknown") for d in inventory if d.driver}
    for engine, driver, version in sorted(drivers):
        family.add_metric([engine, driver, version], 1)
    return family


def allocated_family(
    views: Mapping[str, ResourceView], allocations: Allocations
) -> GaugeMetricFamily:
    """Per served device and holder: how many of its device IDs (shares) that container holds.

    A device nobody holds still shows, once, with empty holder labels and value 0, so "free
    devices" is a query rather than an absence.
    """
    family = GaugeMetricFamily(
        "kae_device_allocated",
        "Device IDs (shares) of the device allocated to the container in the labels.",
        labels=[*DEVICE_LABELS, *HOLDER_LABELS],
    )
    for view in views.values():
        shares: dict[str, Counter[tuple[str, str, str]]] = {}
        devices: dict[str, UacceDevice] = {}
        for advertised in view.devices:
            pci = advertised.device.pci_address
            devices.setdefault(pci, advertised.device)
            held = shares.setdefault(pci, Counter())
            held.update(allocations.by_id.get(advertised.id, ()))
        for pci, held in shares.items():
            ids = _ids(devices[pci])
            if not held:
                family.add_metric([*ids, *NO_HOLDER], 0)
            for holder, count in sorted(held.items()):
                family.add_metric([*ids, *holder], count)
    return family


def daemon_families(snapshot: Snapshot) -> list[Metric]:
    """The plugin's own state: registration with the kubelet, pod-resources reachability.

    ``kae_resource_registered`` has one series per name the kubelet registers: each enabled
    resource in device-plugin mode, the driver's name (``kae.openfuyao.com``) in DRA mode, so
    that ``== 0`` means "pods cannot get devices here" in both.
    """
    registered = GaugeMetricFamily(
        "kae_resource_registered",
        "1 if the kubelet has registered it, else 0: each enabled resource (device-plugin "
        "mode), or the DRA driver kae.openfuyao.com (DRA mode).",
        labels=["resource"],
    )
    expected = snapshot.views if snapshot.expected is None else snapshot.expected
    for resource in sorted(expected):
        registered.add_metric([resource], 1 if resource in snapshot.registered else 0)
    up = GaugeMetricFamily(
        "kae_pod_resources_up",
        "1 if the kubelet pod-resources API answered the last query, else 0.",
        value=0 if snapshot.allocations is None else 1,
    )
    return [registered, up]


def device_families(snapshot: Snapshot) -> list[Metric]:
    # Free queues read once per scrape: the free and in-use series then agree with each other.
    free = {d.pci_address: read_available_instances(d) for d in snapshot.inventory}

    def queues_of(device: UacceDevice) -> int | None:
        return free.get(device.pci_address)

    families = [*inventory_families(snapshot.inventory, queues_of), *daemon_families(snapshot)]
    if snapshot.allocations is not None:  # unknown holders: no series rather than a wrong 0
        families.append(allocated_family(snapshot.views, snapshot.allocations))
    if snapshot.queue_book is not None:
        families += queue_families(
            snapshot.inventory,
            snapshot.views,
            snapshot.queue_book,
            snapshot.allocations,
            queues_of,
        )
    if snapshot.api_requests is not None:  # DRA only
        families.append(api_request_family(snapshot.api_requests))
    if snapshot.node_facts is not None:  # the node's KAE facts (issue 37): node_metrics.py
        families += node_fact_families(snapshot.node_facts, snapshot.inventory)
    families += vf_families(snapshot.vf_changes)  # empty families where no profile is set
    return families


API_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")


def api_request_family(requests: Mapping[str, int]) -> Metric:
    """Requests the driver sent the API server, by verb: each verb from 0, so a rate is never
    absent; writes (create, update, patch, delete) are what a node costs the API server."""
    family = CounterMetricFamily(
        "kae_apiserver_requests",
        "Requests this driver sent the API server (slices, claims, its Node), by verb.",
        labels=["verb"],
    )
    for verb in sorted({*API_VERBS, *requests}):
        family.add_metric([verb], requests.get(verb, 0))
    return family


class SnapshotCollector:
    """The daemon's counters and histograms followed by the device gauges of one snapshot."""

    def __init__(self, snapshot: Snapshot, counters: Counters) -> None:
        self.snapshot = snapshot
        self.counters = counters

    def collect(self) -> Iterable[Metric]:
        return self._collect()

    def _collect(self) -> Iterator[Metric]:
        self.counters.prime(self.snapshot.views)  # also resources a reload enabled since start
        yield from self.counters.registry.collect()
        yield from device_families(self.snapshot)


def exposition(snapshot: Snapshot, counters: Counters, accept: str = "") -> tuple[bytes, str]:
    """The body and content type of a scrape, in the format the scraper's Accept header asks."""
    encoder, content_type = choose_encoder(accept)
    return encoder(SnapshotCollector(snapshot, counters)), content_type


def register_mode_info(
    registry: CollectorRegistry, configured: str, mode: str, reason: str
) -> None:
    """``kae_mode_info{mode, reason, configured}`` = 1: the front end this daemon runs, the
    reason's code (``configured`` for an explicit mode; ``mode: auto``'s rows in docs/modes.md,
    a fixed set, so the series stay few) and the configured ``mode``. Set once at start."""
    info = Gauge(
        "kae_mode_info",
        "The mode this daemon serves (always 1): mode, why (a fixed code) and the configured mode.",
        ["mode", "reason", "configured"],
        registry=registry,
    )
    info.labels(mode, reason, configured).set(1)
