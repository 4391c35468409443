"""Queues in use against queues granted, on every device, in both modes; and who holds it.

"Is my pod really using KAE?" has one honest answer on a node: the device's free queues
(``available_instances``) drop when a process opens it. So, per device whose queue total is
known (``discovery.queues``):

* ``kae_device_queues_in_use``: the total less ``available_instances``, read at scrape time;
* ``kae_device_queues_claimed``: the queues granted: the whole function to a device-plugin
  allocation or an exclusive DRA claim, the sum of the shares on a shared device, 0 while
  nobody holds it. Absent while holders are unknown (device-plugin mode with the kubelet's
  pod-resources API not answering), rather than a wrong 0;
* ``kae_device_holders``: while the device is held, how many hold it (device-plugin pods, or
  DRA claims); where one holds it alone its labels name it (``namespace``, ``pod``, and in
  DRA mode ``claim``; ``pod`` is empty where the kubelet does not report the claim's pods, or
  several pods share the claim), else they are empty. One series per held device at most, so
  cardinality is bounded by the device count; a free device has none.

The kernel does not hold a process to its grant, and ``available_instances`` cannot say whose
the open queues are: on a shared device in use counts everyone's, and host kernel users (such
as dm-crypt on SEC) show up too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kae_deviceplugin.core.model import ClaimHold, Inventory, QueueBook, UacceDevice
from kae_deviceplugin.core.views import ResourceView
from kae_deviceplugin.discovery.scan import read_available_instances
from kae_deviceplugin.kubelet.podresources import Allocations
from kae_deviceplugin.prometheus_lite import GaugeMetricFamily, Metric

DEVICE_LABELS = ("engine", "device", "pci_address")
HOLDER_LABELS = ("namespace", "pod", "claim")
NOBODY_ALONE = ("", "", "")


@dataclass(frozen=True, slots=True, order=True)
class Holder:
    """A device-plugin pod (``claim`` empty) or a DRA claim (``pod`` its one pod, or empty)."""

    namespace: str
    pod: str
    claim: str


def device_plugin_holders(
    views: Mapping[str, ResourceView], allocations: Allocations
) -> dict[str, set[Holder]]:
    """PCI address -> the pods holding any of its device IDs (an init container handing its
    device on to the app containers of its pod is still one pod)."""
    held: dict[str, set[Holder]] = {}
    for view in views.values():
        for advertised in view.devices:
            for namespace, pod, _container in allocations.by_id.get(advertised.id, ()):
                pci = advertised.device.pci_address
                held.setdefault(pci, set()).add(Holder(namespace, pod, ""))
    return held


def claim_pods(allocations: Allocations | None) -> dict[tuple[str, str], set[str]]:
    """(claim namespace, claim name) -> the pods the kubelet says run with the claim."""
    pods: dict[tuple[str, str], set[str]] = {}
    for row in allocations.claims if allocations is not None else ():
        pods.setdefault((row.claim_namespace, row.claim_name), set()).add(row.pod)
    return pods


def granted(total: int, whole: bool, claims: tuple[ClaimHold, ...]) -> int:
    """The whole function where anything holds it whole, else the sum of the shares."""
    if whole or any(hold.queues is None for hold in claims):
        return total
    return sum(hold.queues or 0 for hold in claims)


def queue_families(
    inventory: Inventory,
    views: Mapping[str, ResourceView],
    book: QueueBook,
    allocations: Allocations | None,
    queues_of: Callable[[UacceDevice], int | None] = read_available_instances,
) -> list[Metric]:
    """The three families of the module docstring, for every device with a known total."""
    in_use = GaugeMetricFamily(
        "kae_device_queues_in_use",
        "Hardware queues of the device open now (its total less available_instances, read at "
        "scrape time); absent while unreadable.",
        labels=list(DEVICE_LABELS),
    )
    claimed = GaugeMetricFamily(
        "kae_device_queues_claimed",
        "Hardware queues of the device granted to its holders: the whole function to a "
        "device-plugin allocation or an exclusive claim, the sum of the shares on a shared "
        "device, 0 while free (the kernel does not enforce it).",
        labels=list(DEVICE_LABELS),
    )
    holders_family = GaugeMetricFamily(
        "kae_device_holders",
        "How many hold the device (device-plugin pods, or DRA claims); where one holds it "
        "alone the labels name it. Absent while free.",
        labels=[*DEVICE_LABELS, *HOLDER_LABELS],
    )
    plugin_pods = device_plugin_holders(views, allocations) if allocations is not None else {}
    pods_of = claim_pods(allocations)
    known = allocations is not None or book.claims is not None
    for device in inventory:
        total = book.totals.get(device.pci_address)
        if total is None:
            continue
        ids = [device.engine, device.name, device.pci_address]
        free = queues_of(device)
        if free is not None:
            in_use.add_metric(ids, max(0, total - free))
        if not known:
            continue
        pods = plugin_pods.get(device.pci_address, set())
        claims = (book.claims or {}).get(device.pci_address, ())
        claimed.add_metric(ids, granted(total, bool(pods), claims))
        holders = sorted(pods) + [_claim_holder(hold, pods_of) for hold in claims]
        if holders:
            alone = holders[0] if len(holders) == 1 else Holder(*NOBODY_ALONE)
            holders_family.add_metric([*ids, alone.namespace, alone.pod, alone.claim], len(holders))
    return [in_use, claimed, holders_family]


def _claim_holder(hold: ClaimHold, pods_of: Mapping[tuple[str, str], set[str]]) -> Holder:
    pods = pods_of.get((hold.namespace, hold.claim), set())
    return Holder(hold.namespace, next(iter(pods)) if len(pods) == 1 else "", hold.claim)
