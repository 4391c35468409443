"""Inventory -> the node's ResourceSlice objects, as plain JSON-able dicts (pure, no I/O).

One pool per node, named after the node (pool names must be unique per node, and the node name
is). The pool is cut into slices of at most 128 devices, or 64 whenever devices may be tainted
(unhealthy, or held by a device-plugin pod: both taints appear only with a taint effect set;
without one such devices are left out): the API lowers the limit for a slice with any taint,
and deciding it from the options rather than from today's health and holders keeps the slice
boundaries still when a device flips. An empty
inventory still gets one empty slice: "an empty pool" tells the scheduler the driver runs and
has nothing, which "no pool" does not. Each slice is owned by the Node, so deleting the node
collects its slices. Names are ``<node>-kae.openfuyao.com-<i>``; a node name too long for that
(a slice name is a DNS subdomain of at most 253 characters) is shortened with a hash of the
whole name, so that two long node names never share a slice name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra.api import DRIVER
from kae_deviceplugin.dra.slice_devices import DeviceOptions, RenderedDevice, render_devices

API_VERSION = "resource.k8s.io/v1"
KIND = "ResourceSlice"
MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS = 64
MAX_NAME_LENGTH = 253
_HASH_LENGTH = 10
DEFAULT_OPTIONS = DeviceOptions()  # no taints (unhealthy devices left out), no sharing


@dataclass(frozen=True, slots=True)
class NodeRef:
    """The Node that owns the slices: its name (also the pool's name) and its UID."""

    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class SlicePlan:
    """The slices of the node's pool, and one line per value that had to be cut or left out."""

    slices: tuple[dict[str, Any], ...]
    notes: tuple[str, ...] = ()

    @property
    def device_names(self) -> tuple[str, ...]:
        return tuple(d["name"] for s in self.slices for d in s["spec"]["devices"])


def slice_name(node: str, index: int) -> str:
    """``<node>-kae.openfuyao.com-<index>``, shortened (with a hash) to fit 253 characters."""
    suffix = f"-{DRIVER}-{index}"
    if len(node) + len(suffix) <= MAX_NAME_LENGTH:
        return node + suffix
    digest = hashlib.sha256(node.encode()).hexdigest()[:_HASH_LENGTH]
    keep = MAX_NAME_LENGTH - len(suffix) - _HASH_LENGTH - 1
    # A DNS subdomain's labels end with a letter or digit, so the cut may not end in '-' or '.'.
    return f"{node[:keep].rstrip('-.')}-{digest}{suffix}"


def devices_per_slice(options: DeviceOptions) -> int:
    # Every taint (unhealthy or held) needs a taint effect; without one none can appear.
    return MAX_DEVICES if options.taint_effect is None else MAX_DEVICES_WITH_TAINTS


def build_slices(
    inventory: Inventory,
    node: NodeRef,
    *,
    generation: int,
    queues: Mapping[str, int],
    options: DeviceOptions = DEFAULT_OPTIONS,
) -> SlicePlan:
    """The node's slices at pool ``generation``; ``queues`` maps PCI addresses to queue totals."""
    rendered = render_devices(inventory, queues, options)
    size = devices_per_slice(options)
    chunks: list[list[RenderedDevice]] = [
        rendered[start : start + size] for start in range(0, len(rendered), size)
    ] or [[]]
    pool = {"name": node.name, "generation": generation, "resourceSliceCount": len(chunks)}
    slices = tuple(
        _slice(node, index, pool, [r.entry for r in chunk]) for index, chunk in enumerate(chunks)
    )
    return SlicePlan(slices, tuple(note for r in rendered for note in r.notes))


def _slice(
    node: NodeRef, index: int, pool: dict[str, Any], devices: list[dict[str, Any]]
) -> dict[str, Any]:
    owner = {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": slice_name(node.name, index),
            "ownerReferences": [{**owner, "controller": True}],
        },
        "spec": {"driver": DRIVER, "nodeName": node.name, "pool": dict(pool), "devices": devices},
    }
