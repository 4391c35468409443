"""The DRA driver's slice informer over the project's client and a real socket: it keeps only
the slices its selector selects, whatever the server sends, and a 410 Gone on resuming the
watch is a quiet re-list (INFO, never a problem for /readyz)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.apiserver.rest_api import connect
from kae_deviceplugin.core.backoff import Backoff
from kae_deviceplugin.dra.slice_informer import SliceInformer
from tests.support.apiserver_wire import Request
from tests.support.http_apiserver import write_kubeconfig
from tests.support.raw_http import WATCH_HEAD, chunked, json_answer, serving

DEADLINE = 30.0
DRIVER = "kae.openfuyao.com"
SELECTOR = {"spec.driver": DRIVER, "spec.nodeName": "n1"}
GONE = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}


def a_slice(name: str, node: str, version: int, driver: str = DRIVER) -> dict[str, Any]:
    metadata = {"name": name, "resourceVersion": str(version)}
    return {"metadata": metadata, "spec": {"driver": driver, "nodeName": node}}


def added(obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n"


def test_only_the_selected_slices_are_kept_whatever_the_server_sends(tmp_path: Path) -> None:
    """A list and a watch that carry other nodes' and other drivers' slices too (a server
    that ignores the field selector, a proxy's mix): the cache holds this node's alone."""
    listed = [a_slice("n1-a", "n1", 2), a_slice("n2-a", "n2", 3), a_slice("x", "n1", 4, "other")]
    stream = [added(a_slice(f"n2-{i}", "n2", 10 + i)) for i in range(500)]
    stream.append(added(a_slice("n1-b", "n1", 600)))

    async def respond(request: Request, writer: Any) -> bool:
        if request.query.get("watch"):
            writer.write(WATCH_HEAD + chunked(*stream))
            await asyncio.Event().wait()  # the stream stays open
        writer.write(json_answer(200, {"items": listed, "metadata": {"resourceVersion": "5"}}))
        return True

    async def main() -> None:
        async with serving(respond) as server:
            client = connect(write_kubeconfig(tmp_path / "kubeconfig", server.url, "t0"))
            informer = SliceInformer(client, SELECTOR, Backoff())
            task = asyncio.create_task(informer.run())
            try:
                async with asyncio.timeout(DEADLINE):
                    while "n1-b" not in informer.slices:
                        informer.changed.clear()
                        await informer.changed.wait()
                assert sorted(informer.slices) == ["n1-a", "n1-b"]
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await client.close()

    asyncio.run(main())


def test_a_410_on_resuming_is_a_quiet_relist(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The watch's first event is ERROR 410: the informer lists again, says so at INFO, and
    never names a problem (what /readyz reports) nor logs a WARNING."""
    lists = 0

    async def respond(request: Request, writer: Any) -> bool:
        nonlocal lists
        if request.query.get("watch"):
            error = json.dumps({"type": "ERROR", "object": GONE}).encode() + b"\n"
            writer.write(WATCH_HEAD + chunked(error) + b"0\r\n\r\n")
        else:
            lists += 1
            body = {"items": [a_slice("n1-a", "n1", 2)], "metadata": {"resourceVersion": "5"}}
            writer.write(json_answer(200, body))
        return True

    async def main() -> None:
        async with serving(respond) as server:
            client = connect(write_kubeconfig(tmp_path / "kubeconfig", server.url, "t0"))
            informer = SliceInformer(client, SELECTOR, Backoff(start=0.01, cap=0.05))
            problems: list[str] = []
            task = asyncio.create_task(informer.run())
            try:
                async with asyncio.timeout(DEADLINE):
                    while informer.lists < 3:
                        informer.changed.clear()
                        await informer.changed.wait()
                        problems += [informer.problem] if informer.problem else []
                await server.requested(5)  # the third list's watch too
                problems += [informer.problem] if informer.problem else []
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await client.close()
            assert problems == []

    with caplog.at_level(logging.INFO, logger="kae_deviceplugin.dra.slice_informer"):
        asyncio.run(main())
    records = [r for r in caplog.records if r.name == "kae_deviceplugin.dra.slice_informer"]
    assert not [r for r in records if r.levelno >= logging.WARNING]
    assert any(r.levelno == logging.INFO and "too old" in r.getMessage() for r in records)
