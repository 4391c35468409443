"""The device-plugin front end: per-resource views, their servers and the kubelet's moves.

The daemon hands it every changed inventory (``reconcile``); it publishes one view per resource,
starts a server for each resource with devices and stops the others, and through its kubelet
watch re-registers after a kubelet restart. Readiness is what it says is missing. Devices that
DRA claims of running pods hold (a node back from DRA mode) are advertised Unhealthy until those
pods end (``dra_holds``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from kae_deviceplugin.api import KUBELET_SOCKET
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.container.runtime_cdi import config_paths, from_configs
from kae_deviceplugin.container.serving import ServingPolicy
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.model import Inventory, QueueBook
from kae_deviceplugin.core.views import ResourceView, build_views
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.deviceplugin.dra_holds import DraClaimHolds
from kae_deviceplugin.deviceplugin.kubelet_watch import KubeletWatch
from kae_deviceplugin.deviceplugin.registrars import Registrar
from kae_deviceplugin.deviceplugin.server_set import ServerSet
from kae_deviceplugin.discovery.queues import QueueTotals
from kae_deviceplugin.kubelet.podresources_poll import Holders
from kae_deviceplugin.kubelet.sockets import prepare_socket_dir

log = logging.getLogger(__name__)


class DevicePluginFrontEnd:
    """Serves the inventory to the kubelet as one device-plugin resource per engine."""

    name = "device-plugin"

    def __init__(
        self,
        settings: Settings,
        registrar: Registrar,
        counters: Counters,
        container_files: ContainerFiles,
        *,
        stopping: asyncio.Event,
        tick: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.inventory = Inventory()
        self.container_files = container_files
        self.views: dict[str, ResourceView] = {}
        self.latest: dict[str, LatestValue[ResourceView]] = {}
        self.server_set = ServerSet(
            registrar,
            self.latest,
            self.serving_policy,
            stopping,
            counters,
            kubelet_socket=settings.effective_device_plugin_dir / KUBELET_SOCKET,
        )
        self.kubelet_watch = KubeletWatch(
            settings.effective_device_plugin_dir, self.server_set, tick
        )
        self.dra_holds = DraClaimHolds(
            settings.effective_pod_resources_socket, settings.kubelet_root, self.withhold
        )
        self._reconciled = False
        self.queues = QueueTotals(settings.sysfs_root)
        self.queue_totals: Mapping[str, int] = {}  # by PCI address, for the queue metrics
        self._runtime_cdi: tuple[Path | None, bool] | None = None  # (config read, applies)

    @property
    def registrar(self) -> Registrar:
        return self.server_set.registrar

    @property
    def registered(self) -> set[str]:
        return self.server_set.registered

    def serving_policy(self) -> ServingPolicy:
        return ServingPolicy.from_settings(
            self.settings, self.container_files.problem, runtime_cdi=self.runtime_applies_cdi()
        )

    def runtime_applies_cdi(self) -> bool:
        """With ``cdi`` on, whether the runtime's config says it applies CDI devices: where it
        does not, Allocate names device nodes and mounts as with ``cdi`` off, or the containers
        would start without their devices. Judged once per config path, said once."""
        if not self.settings.cdi:
            return True
        chosen = self.settings.runtime_config
        if self._runtime_cdi is None or self._runtime_cdi[0] != chosen:
            support = from_configs(*config_paths(chosen))
            if support.refused:
                log.error(
                    "cdi is on but %s; Allocate names device nodes and mounts instead "
                    "(turn the runtime's switch on and restart this daemon to use CDI names)",
                    support.reason,
                )
            elif support.applies is None:
                log.info(
                    "cdi is on; %s's config does not say whether it applies CDI devices: "
                    "trusting the setting",
                    support.runtime,
                )
            self._runtime_cdi = (chosen, not support.refused)
        return self._runtime_cdi[1]

    def prepare(self) -> None:
        """Create the socket directory, or refuse in one line (StartupError), as for a
        directory too long for any socket name of ours."""
        prepare_socket_dir(self.registrar.socket_dir, self.registrar.socket_dir_role)
        for engine in ENGINES:
            self.registrar.socket_path(engine.resource)

    def describe(self) -> str:
        """Where the sockets are and how they get registered, for the start-up line."""
        how = "plugin watcher" if self.registrar.recovery == "restart" else "kubelet.sock"
        # plugins_registry in plugin-watcher mode, not device-plugins
        return f"plugin sockets in {self.registrar.socket_dir} (registration: {how})"

    def root_tasks(self) -> list[Coroutine[Any, Any, None]]:
        return [self.kubelet_watch.run(), self.dra_holds.run()]

    def not_ready(self) -> list[str]:
        """What keeps the node from serving pods, one phrase each; empty when ready."""
        if self.registrar.needs_kubelet_socket and not self.kubelet_watch.identity:
            return [f"no kubelet at {self.kubelet_watch.kubelet_socket}"]
        if self.container_files.problem is not None:
            return [self.container_files.problem]
        waiting = [
            resource
            for resource, view in sorted(self.views.items())
            if view.devices and not self.server_set.streaming(resource)
        ]
        return [f"{r} not registered or not streaming" for r in waiting]

    def queue_book(self) -> QueueBook:
        """Each device's queue total; who holds a device is the kubelet's pod-resources answer
        (an allocation here grants the whole function), read by the metrics themselves."""
        return QueueBook(self.queue_totals)

    def api_requests(self) -> None:
        """No API client in this mode: no request metrics."""
        return None

    async def reconcile(self, inventory: Inventory, settings: Settings) -> None:
        """Bring servers and their published views in line with the inventory and settings."""
        async with self.server_set.lock:  # never interleave with a restart
            self.inventory, self.settings = inventory, settings
            self.queue_totals = self.queues.update(inventory)
            # Written before the kubelet hears of a change: an answer never names a missing file.
            self.container_files.sync(settings, inventory, self.serving_policy().container)
            views = build_views(inventory, settings.engines, self.dra_holds.held)
            for resource in list(self.server_set.servers):
                if resource not in views:  # disabled: tell the kubelet "no devices", then go
                    self.publish(ResourceView(resource))
                    await self.server_set.stop(resource)
            for resource, view in views.items():
                self.publish(view)
                if resource not in self.server_set.servers and view.devices:
                    await self.server_set.start(resource)
            self.views = views
            self._reconciled = True

    async def withhold(self, held: Holders) -> None:
        """DRA claims hold other devices now: tell the kubelet. The devices stay the same, so
        only the views change; before the first reconcile there is nothing to tell yet."""
        async with self.server_set.lock:
            if not self._reconciled:
                return
            self.views = build_views(self.inventory, self.settings.engines, held)
            for view in self.views.values():
                self.publish(view)

    def publish(self, view: ResourceView) -> None:
        latest = self.latest.get(view.resource)
        if latest is None:
            self.latest[view.resource] = LatestValue(view)
        elif _differs(latest.value, view):
            latest.publish(view)

    async def shutdown(self) -> None:
        await self.server_set.stop_all()


def _differs(old: ResourceView, new: ResourceView) -> bool:
    """Worth waking every stream for: what the kubelet sees, or which devices back the IDs."""
    if old.kubelet_view != new.kubelet_view:
        return True
    return [(d.device.name, d.device.pci_path) for d in old.devices] != [
        (d.device.name, d.device.pci_path) for d in new.devices
    ]
