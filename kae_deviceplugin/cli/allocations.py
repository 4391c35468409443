"""`kae-deviceplugin list --allocations`: which pod holds which KAE device ID.

Asks a running daemon's ``/allocations`` first (it already holds a fresh answer, and the CLI
may run where the kubelet socket is not mounted), then the kubelet's pod-resources socket
directly. Both failing is one error naming both reasons.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from kae_deviceplugin.config.rules import parse_address
from kae_deviceplugin.kubelet.podresources import (
    LIST_TIMEOUT,
    RECORD_KEYS,
    Allocation,
    PodResourcesUnavailable,
    list_allocations,
)

HTTP_TIMEOUT = 3.0


class AllocationsUnavailable(Exception):
    """Neither the daemon's endpoint nor the pod-resources socket gave an answer."""


def endpoint_url(metrics_address: str) -> str:
    """The base URL to reach a daemon listening on ``metrics_address`` from the same host."""
    host, port = parse_address(metrics_address)
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def from_endpoint(base_url: str, timeout: float = HTTP_TIMEOUT) -> list[Allocation]:
    """The rows a running daemon serves on ``<base_url>/allocations``."""
    url = base_url.rstrip("/") + "/allocations"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            payload = json.load(answer)
    except urllib.error.HTTPError as err:
        detail = _error_of(err.read())
        raise AllocationsUnavailable(f"{url}: HTTP {err.code}{detail}") from err
    except (OSError, ValueError) as err:
        raise AllocationsUnavailable(f"{url}: {_cause(err)}") from err
    try:
        return [Allocation.from_record(record) for record in payload["allocations"]]
    except (KeyError, TypeError, ValueError) as err:
        raise AllocationsUnavailable(f"{url}: unexpected answer ({err})") from err


def _cause(err: Exception) -> str:
    """What went wrong, in words: urllib wraps the socket error as "<urlopen error ...>"."""
    reason = err.reason if isinstance(err, urllib.error.URLError) else err
    if isinstance(reason, OSError) and reason.strerror:
        return f"no daemon answers ({reason.strerror.lower()})"
    if isinstance(reason, TimeoutError):
        return "no answer (timed out)"
    return str(reason)


def _error_of(body: bytes) -> str:
    try:
        return f": {json.loads(body)['error']}"
    except (ValueError, KeyError, TypeError):
        return ""


def from_socket(socket: Path, timeout: float = LIST_TIMEOUT) -> list[Allocation]:
    """The rows the kubelet's pod-resources socket reports for our resources."""
    try:
        return list(asyncio.run(list_allocations(socket, timeout=timeout)).rows)
    except PodResourcesUnavailable as err:
        raise AllocationsUnavailable(f"pod-resources API: {err}") from err


def gather(endpoint: str | None, socket: Path | None) -> tuple[list[Allocation], str]:
    """Rows and where they came from: the endpoint if given and answering, else the socket."""
    problems = []
    if endpoint:
        try:
            return from_endpoint(endpoint), endpoint
        except AllocationsUnavailable as err:
            problems.append(str(err))
    if socket is not None:
        try:
            return from_socket(socket), str(socket)
        except AllocationsUnavailable as err:
            problems.append(str(err))
    if not problems:
        raise AllocationsUnavailable("nothing to ask: give an endpoint or a pod-resources socket")
    raise AllocationsUnavailable("; ".join(problems))


def render_json(rows: Sequence[Allocation]) -> str:
    return json.dumps([row.as_record() for row in rows], indent=2)


_HEADER = ("RESOURCE", "DEVICE ID", "NAMESPACE", "POD", "CONTAINER")


def render_table(rows: Sequence[Allocation]) -> str:
    if not rows:
        return "no KAE device is allocated to a pod"
    table = [_HEADER, *([getattr(row, key) for key in RECORD_KEYS] for row in rows)]
    widths = [max(len(str(line[i])) for line in table) for i in range(len(_HEADER))]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    )
