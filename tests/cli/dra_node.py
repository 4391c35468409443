"""A DRA node for doctor's and list's tests: a built sysfs tree, a kubelet root with the
driver's real registration socket served on it, the in-memory API server holding the pool the
driver would publish, and real checkpoint and CDI files."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from kae_deviceplugin.apiserver.seam import NODES, RESOURCE_SLICES, ApiServer, JsonObject
from kae_deviceplugin.cli import doctor
from kae_deviceplugin.cli.checks import Row
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.queues import QueueTotals
from kae_deviceplugin.dra.api import DRIVER, HEALTH_SERVICES, PLUGIN_SERVICES, PLUGIN_TYPE
from kae_deviceplugin.dra.checkpoint import (
    CheckpointFile,
    PreparedClaim,
    PreparedDevice,
)
from kae_deviceplugin.dra.slices import NodeRef, build_slices
from kae_deviceplugin.kubelet.pluginwatcher import RegistrationServicer, add_registration
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.dra.inventories import tree_inventory
from tests.dra.serving import socket_dir
from tests.support.fake_apiserver import FakeApiServer

NODE = "worker-1"
HPRE_0 = "hpre-0000-79-00-0"  # hisi_hpre-2 on kunpeng920-2p
SEC_0 = "sec-0000-76-00-0"
UID_A = "0b3c7a52-1111-4c2e-9a55-000000000001"
UID_B = "0b3c7a52-1111-4c2e-9a55-000000000002"


@dataclass
class DraNode:
    """Paths of one node; ``api`` holds what the driver would have published for it."""

    root: Path
    api: FakeApiServer = field(default_factory=FakeApiServer)

    @property
    def kubelet(self) -> Path:
        return self.root / "k"

    @property
    def registry(self) -> Path:
        return self.kubelet / "plugins_registry"

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet / "plugins" / DRIVER

    @property
    def cdi(self) -> Path:
        return self.root / "cdi"

    @property
    def inventory(self) -> Inventory:
        return tree_inventory(self.root)

    def targets(self, node: str | None = NODE) -> doctor.Targets:
        return doctor.Targets(
            sysfs_root=self.root / "sys",
            dev_root=self.root / "dev",
            kubelet_root=self.kubelet,
            metrics_address="",
            nfd_features_file=None,
            mode="dra",
            node_name=node,
            cdi_dir=self.cdi,
        )

    def slices(self, generation: int = 1) -> list[JsonObject]:
        """The pool as the driver builds it from this node's scan."""
        queues = QueueTotals(self.root / "sys").update(self.inventory)
        plan = build_slices(self.inventory, NodeRef(NODE, "node-uid"), generation=generation,
                            queues=queues)  # fmt: skip
        return list(plan.slices)

    def publish(self, slices: Sequence[JsonObject] | None = None) -> None:
        """The Node and its slices in the in-memory API server."""
        asyncio.run(self._publish(self.slices() if slices is None else slices))

    async def _publish(self, slices: Sequence[JsonObject]) -> None:
        runtime = {"nodeInfo": {"containerRuntimeVersion": "containerd://2.4.2"}}
        await self.api.create(NODES, {"metadata": {"name": NODE}, "status": runtime})
        for body in slices:
            await self.api.create(RESOURCE_SLICES, body)

    def prepare(self, uid: str, name: str, *devices: str, spec: bool = True) -> None:
        """A claim in the checkpoint holding ``devices``, with its CDI spec file if ``spec``."""
        file = CheckpointFile(self.plugin_dir)
        spec_name = f"openfuyao.com-kae_{uid}.json"
        results = tuple(PreparedDevice("kae", NODE, d) for d in devices)
        claim = PreparedClaim(uid, "team-a", name, results, spec_name)
        file.save(file.read_only().with_claim(claim))
        if spec:
            self.cdi.mkdir(exist_ok=True)
            (self.cdi / spec_name).write_text("{}\n")

    def check(self, connect: Callable[[Path | None], ApiServer] | None = None) -> list[Row]:
        """doctor's rows in DRA mode, the API being ``self.api`` unless ``connect`` says."""
        return doctor.run_checks(self.targets(), connect or (lambda _config: self.api))


@contextlib.contextmanager
def dra_node(tree: str = "kunpeng920-2p") -> Iterator[DraNode]:
    """A node under /tmp (socket paths stay short) with the named tree and an empty kubelet."""
    with socket_dir() as root:
        TREES[tree].build(root)
        (root / "k" / "plugins_registry").mkdir(parents=True)
        (root / "k" / "plugins" / DRIVER).mkdir(parents=True)
        yield DraNode(root)


def listening_socket(path: Path) -> socket.socket:
    """A real unix socket bound and listening at ``path`` (the driver's service socket)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    return sock


@contextlib.asynccontextmanager
async def registration(
    node: DraNode,
    name: str = f"{DRIVER}-reg.sock",
    *,
    plugin_type: str = PLUGIN_TYPE,
    driver: str = DRIVER,
    versions: Sequence[str] = (*PLUGIN_SERVICES, *HEALTH_SERVICES),
    endpoint: Path | None = None,
) -> AsyncIterator[Path]:
    """The registration servicer the driver runs, on a real socket in plugins_registry, naming
    ``endpoint`` (default: a listening service socket in the plugin directory)."""
    service = node.plugin_dir / "dra.sock"
    listener = listening_socket(service) if endpoint is None else None
    server = grpc.aio.server()
    servicer = RegistrationServicer(
        plugin_type, driver, str(endpoint or service), list(versions), lambda: None
    )
    add_registration(server, servicer)
    path = node.registry / name
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    try:
        yield path
    finally:
        await server.stop(None)
        if listener is not None:
            listener.close()
            service.unlink()


def by_check(rows: Sequence[Row]) -> dict[str, list[Row]]:
    found: dict[str, list[Row]] = {}
    for row in rows:
        found.setdefault(row.check, []).append(row)
    return found


async def checked(node: DraNode, **kw: Any) -> dict[str, list[Row]]:
    """doctor's rows by check, run in a worker thread beside the test's serving loop."""
    return by_check(await asyncio.to_thread(node.check, **kw))
