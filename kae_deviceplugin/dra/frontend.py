"""The DRA front end: the node's pool in the API, and the kubelet plugin that prepares claims.

Two sockets, as the kubelet's plugin manager wants them: the registration socket in
``<kubelet root>/plugins_registry`` (GetInfo: type DRAPlugin, our driver name, the service
socket, the services served) and the service socket under ``<kubelet root>/plugins/<driver>``
(DRAPlugin v1 and v1beta1, DRAResourceHealth v1 and v1alpha1). With ``POD_UID`` set (the chart's
downward API) both names carry it, so a rolling update with maxSurge has two live instances.
The checkpoint lives beside the service socket, in the kubelet's own directory, which outlives
the pod. SIGTERM leaves the slices, the CDI specs and the checkpoint in place: running pods need
them, and the next instance takes them over.

The API server is never a reason to stop: the kubelet plugin is served from the start, and the
publishing job (``pool_publishing``) and the stale-claim sweep (``stale_claims``) wait for it,
retry, and say in ``not_ready`` what they wait for.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Coroutine, Mapping
from types import MappingProxyType
from typing import Any

from kae_deviceplugin.apiserver.paced import PacedApi
from kae_deviceplugin.apiserver.seam import RESOURCE_CLAIMS, ApiServer, JsonObject
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.cdi import check_cdi_dir
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.container.runtime_cdi import (
    CONTAINERD_CONFIG,
    ISULAD_CONFIG,
    CdiSupport,
    runtime_of,
)
from kae_deviceplugin.container.serving import ServingPolicy
from kae_deviceplugin.container.sysfs_view import view_problem
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Inventory, QueueBook
from kae_deviceplugin.core.views import ResourceView, build_views
from kae_deviceplugin.dra.api import (
    DRIVER,
    plugin_dir,
)
from kae_deviceplugin.dra.checkpoint import Checkpoint, CheckpointFile
from kae_deviceplugin.dra.claim_status_writer import ClaimStatusWriter
from kae_deviceplugin.dra.held_devices import DevicePluginHolds
from kae_deviceplugin.dra.kubelet_role import KubeletRole
from kae_deviceplugin.dra.pool_publishing import PoolPublishing
from kae_deviceplugin.dra.pool_queues import PoolQueues
from kae_deviceplugin.dra.prepare import ClaimPreparer
from kae_deviceplugin.dra.publisher import TAINTS, SlicePublisher
from kae_deviceplugin.dra.slice_devices import DeviceOptions
from kae_deviceplugin.dra.slices import NodeRef, build_slices
from kae_deviceplugin.dra.stale_claims import StaleClaimSweeper
from kae_deviceplugin.kubelet.sockets import prepare_socket_dir

log = logging.getLogger(__name__)

STOP_GRACE = 0.5


def device_options(
    settings: Settings,
    dropped: frozenset[str] = frozenset(),
    held: Mapping[str, str] = MappingProxyType({}),
) -> DeviceOptions:
    """What the slices publish beyond the description: taints on unhealthy devices unless
    ``omit`` or the API server drops taints (then unhealthy devices are left out), consumable
    queues for the shared engines, and the devices device-plugin pods hold (``held``: tainted,
    or left out where unhealthy devices are)."""
    effect = settings.unhealthy_taint_effect
    return DeviceOptions(
        taint_effect=None if effect == "omit" or TAINTS in dropped else effect,
        shared_engines=settings.shared_engines,
        held=held,
    )


class DraFrontEnd:
    """Publishes the inventory as ResourceSlices and serves the kubelet's DRA calls. ``api``
    serves the pool (slices, the Node), ``claims_api`` the claims (reads, the sweep): a lane of
    its own, so a burst of claims never delays a health change reaching the slices.
    ``status_api`` writes the claims' status, which follows each call, off the kubelet's path:
    a third lane, so those writes never delay a later prepare's claim read."""

    name = "dra"

    def __init__(
        self,
        settings: Settings,
        api: ApiServer,
        node: str,
        container_files: ContainerFiles,
        claims_api: ApiServer | None = None,  # the claims' lane, if not ``api`` (``paced``)
        *,
        status_api: ApiServer | None = None,  # the claims' status lane, if not ``claims_api``
    ) -> None:
        self.settings = settings
        self.api = api
        self.claims_api = api if claims_api is None else claims_api
        self.node = node
        self.container_files = container_files
        self.inventory = Inventory()
        self.inventories: LatestValue[Inventory] = LatestValue(self.inventory)
        self.views: Mapping[str, ResourceView] = {}
        self.plugin_dir = plugin_dir(settings.kubelet_root)
        self.role = KubeletRole(settings.kubelet_root, os.environ.get("POD_UID") or None)
        self.registered = self.role.registered
        self.registration_socket, self.service_socket = (
            self.role.registration_socket,
            self.role.service_socket,
        )
        self.queues = PoolQueues(settings.sysfs_root)
        self._view_written = False  # the view was synced (and is to be looked at again)
        self.cdi = CdiSupport(None, "not known yet")  # from the Node, once the API answers
        chosen = settings.runtime_config  # else the runtimes' own paths, as the chart mounts them
        self.runtime_configs = (chosen or CONTAINERD_CONFIG, chosen or ISULAD_CONFIG)
        self.publishing = PoolPublishing(
            api, node, self.plugin_dir, self._new_publisher, on_node=self._runtime_from
        )
        # Devices device-plugin pods hold (a node that moved to DRA): a change republishes.
        self.held = DevicePluginHolds(
            settings.effective_pod_resources_socket,
            node,
            lambda: self.inventories.publish(self.inventory),
        )
        self.preparer = self._new_preparer()  # a damaged checkpoint refuses to start
        self.sweeper = StaleClaimSweeper(self.preparer, self._get_claim)
        self.status = ClaimStatusWriter(
            self.claims_api if status_api is None else status_api,
            DRIVER,
            lambda: self.inventory,
            self._prepared,
            totals=lambda: self.queues.published,
        )

    def _new_preparer(self) -> ClaimPreparer:
        return ClaimPreparer(
            pool=self.node,
            inventory=lambda: self.inventory,
            policy=self.serving_policy,
            get_claim=self.held.guard(self._get_claim),
            checkpoint=CheckpointFile(self.plugin_dir),
            cdi_dir=self.settings.cdi_dir,
            refusal=lambda: self.cdi.reason if self.cdi.refused else None,
            shares=self.share_limits,
        )

    def _new_publisher(self, job: PoolPublishing) -> SlicePublisher:
        return SlicePublisher(self.api, DRIVER, self.node, self._slices)

    def _prepared(self) -> Checkpoint:
        return self.preparer.state

    @property
    def publisher(self) -> SlicePublisher:
        return self.publishing.publisher

    def serving_policy(self) -> ServingPolicy:
        self._check_view()
        return ServingPolicy.from_settings(self.settings, self.container_files.problem)

    def _check_view(self) -> None:
        """The view the claims' specs mount (``<state dir>/uacce-class``), looked at again at
        each prepare and readiness probe: in DRA mode the scan writes it only when the
        inventory changes, so a state dir swapped for a symlink meanwhile would go unnoticed
        and new specs would mount through the link. Found so, it is the view's problem: the
        scan loop then writes the view again each tick until it can."""
        if not self._view_written or self.container_files.problem is not None:
            return
        if (problem := view_problem(self.settings.state_dir)) is not None:
            log.error("cannot update the container view or CDI spec: %s", problem)
            self.container_files.problem = problem

    async def _get_claim(self, namespace: str, name: str) -> JsonObject:
        return await self.claims_api.get(RESOURCE_CLAIMS, name, namespace)

    def _runtime_from(self, node: JsonObject) -> None:
        """A runtime that does not apply CDI devices gets an empty pool and every claim refused
        (``container.runtime_cdi``), with the fix in the log."""
        self.cdi = runtime_of(node, *self.runtime_configs)
        if self.cdi.refused:
            log.error("no KAE device is published and every claim is refused: %s", self.cdi.reason)

    def _slices(
        self, inventory: Inventory, generation: int, dropped: frozenset[str]
    ) -> list[JsonObject]:
        if self.cdi.refused:  # no claim could reach its container: offer none
            inventory = Inventory()
        if self.queues.publish(inventory):  # the claims' status data names the totals
            self.status.changed()
        plan = build_slices(
            inventory,
            NodeRef(self.node, self.publishing.node_uid),
            generation=generation,
            queues=self.queues.published,
            options=device_options(self.settings, dropped, self.held.held),
        )
        return list(plan.slices)

    def share_limits(self) -> dict[str, int | str]:
        return self.queues.share_limits(self.inventory, self.settings.shared_engines)

    def queue_book(self) -> QueueBook:
        return self.queues.book(self.inventory, self.preparer.state, self.node)

    def api_requests(self) -> Mapping[str, int] | None:
        """Requests sent to the API server by verb, where the client counts them (PacedApi)."""
        return dict(self.api.requests) if isinstance(self.api, PacedApi) else None

    def prepare(self) -> None:
        """Create the plugin, registry and CDI directories, or refuse in one line (before any
        socket is up: a claim's spec that cannot be written would fail every prepare); a
        kubelet root too long for any socket name is refused first."""
        self.role.check()  # SocketPathTooLong, exit 3
        prepare_socket_dir(self.plugin_dir, "plugins")
        prepare_socket_dir(self.registration_socket.parent, "plugins_registry")
        check_cdi_dir(self.settings.cdi_dir)

    def describe(self) -> str:
        return (
            f"DRA driver {DRIVER} for node {self.node}: service socket {self.service_socket}, "
            f"registration {self.registration_socket}"
        )

    def root_tasks(self) -> list[Coroutine[Any, Any, None]]:
        return [
            self._serve(),
            self._publish(),
            self.sweeper.run(),
            self.held.run(),
            self.status.run(),
        ]

    def not_ready(self) -> list[str]:
        self._check_view()
        missing = []
        if self.container_files.problem is not None:
            missing.append(self.container_files.problem)
        if DRIVER not in self.registered:
            missing.append("not registered with the kubelet's plugin watcher")
        if self.cdi.refused:
            missing.append(self.cdi.reason)
        # The checkpoint unreadable, or the plugin directory replaced (a symlink): no call
        # can be served until someone looks.
        missing += self.preparer.problems()
        return missing + self.publishing.problems()

    async def reconcile(self, inventory: Inventory, settings: Settings) -> None:
        """The node-wide view first (the claims' CDI specs mount it), then every subscriber."""
        self.inventory, self.settings = inventory, settings
        self.queues.seen(inventory)
        self._view_written = False  # no second look while the sync below writes it
        self.container_files.sync(settings, inventory, self.serving_policy().container)
        self._view_written = settings.container_sysfs_view
        self.views = build_views(inventory, settings.engines)
        self.inventories.publish(inventory)
        self.status.changed()  # a device's health is in its holders' claim status

    async def _publish(self) -> None:
        await self.held.settled()  # no first slice offering a held device as free
        await self.publishing.run(self.inventories)

    async def _serve(self) -> None:
        reconciled = await self.preparer.reconcile()
        for problem in reconciled.problems:
            log.warning("checkpoint reconcile: %s", problem)
        await self.role.serve(self.preparer, self.inventories, self.node, self.status.changed)

    async def shutdown(self) -> None:
        """Stop serving and remove the sockets this process bound; slices, specs and
        checkpoint stay."""
        await self.role.shutdown()
