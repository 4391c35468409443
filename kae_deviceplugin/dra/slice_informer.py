"""The API's copy of this node's ResourceSlices, kept current by list-then-watch.

Informer semantics: every start or restart of the watch begins with a list, and the watch
resumes from that list's resourceVersion, so nothing that happened in between (a slice the
kubelet deleted at its start, say) is missed. Whatever ends the watch (410 Gone, a broken or
undecodable stream, a token file that cannot be read, a refusal) ends in the same place: the
error is logged once per change, ``problem`` names it for ``/readyz``, and after a backoff
that grows while the failures last, the informer lists again. Each list and each event sets
``changed``, which wakes the publisher; the publisher also tells the informer what it wrote
itself (``wrote``), so its next reconcile does not wait for its own events to come back.

Only the slices the selector selects are kept, whatever the server sends (a proxy's or a
misbehaving server's other objects would otherwise grow the cache without bound). A 410 Gone
on resuming (the version fell out of the server's window: routine after a long watch) is a
quiet re-list, said at INFO and never a problem for ``/readyz``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from kae_deviceplugin.apiserver.seam import RESOURCE_SLICES, ApiServer, JsonObject
from kae_deviceplugin.core.backoff import Backoff
from kae_deviceplugin.errors import ApiError

log = logging.getLogger(__name__)

LIST = "list"
GONE = 410  # the watch's version is older than the server keeps: list again


def selects(selector: Mapping[str, str], obj: Mapping[str, object]) -> bool:
    """Whether ``obj`` has each field of the field selector (``spec.nodeName=n1``...)."""
    for path, wanted in selector.items():
        found: object = obj
        for part in path.split("."):
            found = found.get(part) if isinstance(found, Mapping) else None
        if found != wanted:
            return False
    return True


def _version(obj: Mapping[str, object]) -> int:
    metadata = obj.get("metadata")
    raw = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    try:
        return int(str(raw))
    except ValueError:
        return -1  # not a number: never newer than what we hold


class SliceInformer:
    """A cache of the slices that ``selector`` selects, by name."""

    def __init__(self, api: ApiServer, selector: Mapping[str, str], backoff: Backoff) -> None:
        self.api = api
        self.selector = dict(selector)
        self.backoff = backoff
        self.slices: dict[str, JsonObject] = {}
        self.synced = asyncio.Event()  # a list has succeeded since the last failure
        self.changed = asyncio.Event()
        self.problem: str | None = None  # why the cache may be stale, while it is
        self.lists = 0  # lists made, for the tests
        self.on_recovered: Callable[[], None] = lambda: None  # the server answers again

    def wrote(self, obj: JsonObject) -> None:
        """Our own successful write: take it unless the cache already holds something newer."""
        name = obj["metadata"]["name"]
        held = self.slices.get(name)
        if held is None or _version(obj) >= _version(held):
            self.slices[name] = obj

    def deleted(self, name: str) -> None:
        self.slices.pop(name, None)

    async def run(self) -> None:
        """List, then watch from the list, forever; never raises but for cancellation."""
        loop = asyncio.get_running_loop()
        while True:
            wait = self.backoff.not_before(LIST) - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                # Ended cleanly or by 410 Gone: list again, after the first backoff step, so a
                # server that ends every watch at once costs two lists a second, not a loop.
                ended = await self._list_and_watch()
                self._failed(LIST, ended, quiet=True)
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                self._failed(LIST, err)
            except Exception as err:  # a bug or a library's own error: same recovery, traceback
                log.exception("watch of ResourceSlices failed unexpectedly")
                self._failed(LIST, ApiError(f"{type(err).__name__}: {err}"))

    async def resync(self) -> str:
        """List the slices into the cache; the list's resourceVersion. Raises ApiError."""
        items, version = await self.api.list_versioned(RESOURCE_SLICES, self.selector)
        self.lists += 1
        self.slices = {obj["metadata"]["name"]: obj for obj in items if self._ours(obj)}
        self._recovered()
        return version

    async def _list_and_watch(self) -> ApiError:
        """List, then watch until the server ends the watch: how it ended, when that is no
        problem (cleanly, or 410 Gone); ApiError for any other end."""
        version = await self.resync()
        try:
            await self._watch(version)
        except ApiError as err:
            if err.status != GONE:
                raise
            log.info("ResourceSlices: %s; listing again", err)
            return err
        return ApiError("the watch ended")

    async def _watch(self, version: str) -> None:
        async for event, obj in self.api.watch(RESOURCE_SLICES, self.selector, version):
            name = obj.get("metadata", {}).get("name")
            if not isinstance(name, str):
                continue  # a BOOKMARK carries no object of ours
            if not self._ours(obj):
                self.slices.pop(name, None)  # not (or no longer) selected: never kept
            elif event == "DELETED":
                self.slices.pop(name, None)
            elif event in ("ADDED", "MODIFIED"):
                self.wrote(obj)
            self.changed.set()

    def _ours(self, obj: JsonObject) -> bool:
        return isinstance(obj.get("metadata"), Mapping) and selects(self.selector, obj)

    def _recovered(self) -> None:
        if self.problem is not None:
            log.info("ResourceSlices listed and watched again")
        self.problem = None
        self.backoff.succeeded(LIST)
        self.on_recovered()  # writes that failed only because it was away may go at once
        self.synced.set()
        self.changed.set()

    def _failed(self, key: str, err: ApiError, *, quiet: bool = False) -> None:
        now = asyncio.get_running_loop().time()
        delay = self.backoff.failed(key, now, transient=err.status == 0)
        self.synced.clear()
        if quiet:
            log.debug("watch of ResourceSlices ended; listing again in %.1f s", delay)
            return
        problem = f"watch of ResourceSlices down: {err}"
        if problem != self.problem:
            log.warning("%s; listing again in %.1f s", problem, delay)
        self.problem = problem
