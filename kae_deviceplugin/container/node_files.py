"""The node-wide files that Allocate answers point at: the container sysfs view, the CDI spec and
(``env.opensslConf``) the OpenSSL configuration.

Written on every reconcile before the kubelet hears of a change, so that an answer never names a
link or spec entry that does not exist yet. That ordering is why this writer is called by the
reconcile rather than subscribing to the inventory broadcast on its own. When the files cannot be
written, ``problem`` says why: readiness fails and Allocate refuses, rather than handing a
container a view that does not work.
"""

from __future__ import annotations

import logging

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container import cdi
from kae_deviceplugin.container.edits import ContainerOptions, device_edits
from kae_deviceplugin.container.openssl_conf import write_conf
from kae_deviceplugin.container.sysfs_view import sync_view
from kae_deviceplugin.core.model import Inventory

log = logging.getLogger(__name__)


class ContainerFiles:
    """Keeps the view and the CDI spec in step with the inventory; remembers the last failure."""

    def __init__(self) -> None:
        self.problem: str | None = None  # why the view or the spec cannot be written, if so

    def sync(self, settings: Settings, inventory: Inventory, options: ContainerOptions) -> None:
        try:
            if settings.container_sysfs_view:
                sync_view(settings.state_dir, inventory.devices)
            if settings.env.openssl_conf:
                write_conf(settings.state_dir)
            if settings.cdi:
                entries = (cdi.device_entry(d, device_edits(d, options)) for d in inventory)
                cdi.write_spec(settings.cdi_dir, cdi.build_spec(entries))
        except OSError as err:
            if self.problem is None:  # logged when it appears, not on every tick
                log.error("cannot update the container view or CDI spec: %s", err)
            self.problem = str(err)
            return
        if self.problem is not None:
            log.info("the container view and CDI spec are written again")
        self.problem = None
