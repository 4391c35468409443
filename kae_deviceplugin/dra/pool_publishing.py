"""One driver instance's publishing job: become the node's one publisher, find the Node that
owns the slices, then keep the pool current; supervised, and never a reason to exit.

* **One publisher per node.** Two instances run at once during a rolling update; if both
  published, each would rewrite what the other wrote whenever the two versions render a slice
  differently. The holder of ``publisher.lock`` (``file_lock``) publishes; the other stands by,
  and is ready, since the node's pool is being kept; it takes over when the holder stops (the
  lock dies with its process).
* **The API server may be away.** The Node lookup is retried with backoff, and until it
  answers, ``problems`` says what is awaited; the kubelet plugin is served meanwhile (prepare of
  checkpointed claims and every unprepare need no API server).
* **Supervised.** Anything unexpected that escapes the publisher is logged with its traceback,
  named in ``problems``, and the job starts again after a backoff, rather than the daemon
  exiting and the kubelet losing its plugin.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from kae_deviceplugin.apiserver.seam import NODES, ApiServer, JsonObject
from kae_deviceplugin.core.backoff import Backoff
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra.file_lock import FileLock
from kae_deviceplugin.dra.publisher import SlicePublisher
from kae_deviceplugin.errors import ApiError

log = logging.getLogger(__name__)

LOCK_NAME = "publisher.lock"
STANDBY_POLL = 1.0  # how often a standing-by instance tries the lock
NODE = "node"
RESTART = "restart"


class PoolPublishing:
    """Leadership, the Node lookup and the publisher, for one node."""

    def __init__(
        self,
        api: ApiServer,
        node: str,
        plugin_dir: Path,
        make_publisher: Callable[[PoolPublishing], SlicePublisher],
        *,
        backoff: Backoff | None = None,
        on_node: Callable[[JsonObject], None] = lambda node: None,
    ) -> None:
        self.api = api
        self.node = node
        self.lock = FileLock(plugin_dir / LOCK_NAME, poll_cap=STANDBY_POLL)
        self.backoff = backoff or Backoff()
        self.node_uid = ""  # the owner of our slices, once the API server told us
        self.standby = False
        self.waiting: str | None = None  # what the job waits for, while it does
        self.on_node = on_node  # told the Node once found, before anything is published
        self.publisher = make_publisher(self)

    def problems(self) -> list[str]:
        """Why the node's pool may not be current, for ``/readyz``; none while standing by."""
        if self.standby:
            return []
        found = [self.waiting] if self.waiting else []
        found += self.publisher.problems()
        if not found and self.publisher.generation == 0:
            found.append("ResourceSlices not published yet")
        return found

    async def run(self, inventories: LatestValue[Inventory]) -> None:
        """Publish until cancelled, starting again after anything unexpected."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    await self._lead()
                    await self._find_node()
                    self.waiting = None
                    await self.publisher.run(inventories)
                except asyncio.CancelledError:
                    raise
                except Exception as err:
                    delay = self.backoff.failed(RESTART, loop.time())
                    log.exception("publishing ResourceSlices failed; again in %.1f s", delay)
                    self.waiting = f"publisher restarting after {type(err).__name__}: {err}"
                    await asyncio.sleep(delay)
        finally:
            self.lock.release()

    async def _lead(self) -> None:
        if self.lock.try_acquire():
            return
        self.standby = True
        log.info("another driver instance publishes node %s's pool; standing by", self.node)
        await self.lock.acquire()
        self.standby = False
        log.info("took over publishing node %s's pool", self.node)

    async def _find_node(self) -> None:
        """The Node's UID (the slices' owner), retried with backoff while the API refuses."""
        loop = asyncio.get_running_loop()
        while not self.node_uid:
            try:
                node = await self.api.get(NODES, self.node)
                self.on_node(node)
                self.node_uid = str(node["metadata"]["uid"])
            except ApiError as err:
                delay = self.backoff.failed(NODE, loop.time(), transient=err.status == 0)
                waiting = f"waiting for Node {self.node} from the API server: {err}"
                if waiting != self.waiting:
                    log.warning("%s; again in %.1f s", waiting, delay)
                self.waiting = waiting
                await asyncio.sleep(delay)
        self.backoff.succeeded(NODE)
