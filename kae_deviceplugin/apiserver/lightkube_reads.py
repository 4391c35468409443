"""``ClusterReads`` over lightkube, with a person's credentials as kubectl finds them.

kubectl's order: ``--kubeconfig``, else ``KUBECONFIG`` (its first file that exists: lightkube
reads one file, so a list is not merged as kubectl merges it), else ``~/.kube/config``, else the
pod's service account; ``--context`` picks a context of the file. Errors are said in the words
of the daemon's client (``rest_errors``), so both say the same thing about the same fault. A
person's command runs for a moment, so lightkube's memory does not matter here as it does in the
daemon, which has a client of its own (``rest_api``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx2
from lightkube import ALL_NS, AsyncClient, KubeConfig, SingleConfig
from lightkube.core.exceptions import ApiError as LightkubeApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from kae_deviceplugin.apiserver.rest_api import REQUEST_TIMEOUT
from kae_deviceplugin.apiserver.rest_errors import described, not_a_status, status_said
from kae_deviceplugin.apiserver.seam import JsonObject, Kind
from kae_deviceplugin.errors import UNREACHABLE, ApiError

DEFAULT_KUBECONFIG = Path("~/.kube/config")
# httpx logs every request at INFO: a listing of many kinds would be one line each.
logging.getLogger("httpx2").setLevel(logging.WARNING)


@functools.cache
def _resource(kind: Kind) -> Any:
    """lightkube's generic (dict) resource class for ``kind``, made once."""
    make = create_namespaced_resource if kind.namespaced else create_global_resource
    return make(kind.group, kind.version, kind.kind, kind.plural)


def _plain(obj: Any) -> JsonObject:
    """A generic resource as the plain dict it is (typed ones are converted)."""
    return dict(obj) if isinstance(obj, dict) else dict(obj.to_dict())


@contextlib.asynccontextmanager
async def _translated(verb: str, plural: str, name: str | None, server: str) -> AsyncIterator[None]:
    """lightkube's and httpx's errors as ``errors.ApiError``, in the daemon client's words."""
    at, asked = described(verb, plural, name, server)
    try:
        yield
    except LightkubeApiError as err:
        response = getattr(err, "response", None)
        status = err.status.to_dict() if hasattr(err.status, "to_dict") else {}
        said, code, reason = status_said(status, response.status_code if response else 0)
        details = status.get("details") if isinstance(status, Mapping) else None
        raise ApiError(f"{at}: {said}", status=code, reason=reason,
                       details=details if isinstance(details, Mapping) else None,
                       **asked) from err  # fmt: skip
    except httpx2.HTTPStatusError as err:  # an answer that is no Status object (a proxy's page)
        response = err.response
        raise not_a_status(at, response.status_code, response.reason_phrase, asked) from err
    except httpx2.HTTPError as err:
        raise ApiError(
            f"{at}: API server not reachable ({err})", reason=UNREACHABLE, **asked
        ) from err


class LightkubeReads:
    """The calls of ``reads.ClusterReads`` on one lightkube ``AsyncClient``."""

    def __init__(self, client: AsyncClient, server: str, namespace: str) -> None:
        self.client = client
        self._server = server
        self._namespace = namespace

    @property
    def server(self) -> str:
        return self._server

    @property
    def namespace(self) -> str:
        return self._namespace

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JsonObject:
        async with _translated("get", kind.plural, name, self._server):
            return _plain(await self.client.get(_resource(kind), name, namespace=namespace))

    async def list_all(
        self, kind: Kind, field_selector: Mapping[str, str] | None = None
    ) -> list[JsonObject]:
        namespace = ALL_NS if kind.namespaced else None
        async with _translated("list", kind.plural, None, self._server):
            found = self.client.list(
                _resource(kind), namespace=namespace, fields=dict(field_selector or {})
            )
            return [_plain(obj) async for obj in found]

    async def close(self) -> None:
        await self.client.close()


def kubeconfig_path(given: Path | None, environ: Mapping[str, str]) -> Path | None:
    """The kubeconfig file kubectl would read; None: none exists (then the in-cluster account)."""
    if given is not None:
        return given
    listed = [Path(p).expanduser() for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    for path in [*listed, DEFAULT_KUBECONFIG.expanduser()]:
        if path.is_file():
            return path
    return None


def user_config(
    kubeconfig: Path | None, context: str | None, environ: Mapping[str, str]
) -> SingleConfig:
    """The cluster and user to read with; ``ApiError`` naming what could not be read."""
    path = kubeconfig_path(kubeconfig, environ)
    try:
        if path is None:
            if context is not None:
                raise ApiError(f"--context {context}: no kubeconfig file to find it in")
            found = KubeConfig.from_service_account().get()
        else:
            found = KubeConfig.from_file(path).get(context)
    except ApiError:
        raise
    except Exception as err:  # lightkube raises several kinds for a missing or bad config
        if path is None:
            raise ApiError(
                "no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config) and no in-cluster "
                f"service account ({err})"
            ) from err
        raise ApiError(f"cannot read {path}: {err}") from err
    if found is None:
        raise ApiError(f"{path}: no current context; name one with --context")
    return found


def connect_reader(
    kubeconfig: Path | None, context: str | None, environ: Mapping[str, str] | None = None
) -> LightkubeReads:
    """A reader with the credentials kubectl would use."""
    config = user_config(kubeconfig, context, os.environ if environ is None else environ)
    client = AsyncClient(config, timeout=httpx2.Timeout(REQUEST_TIMEOUT))
    return LightkubeReads(client, str(config.cluster.server), config.namespace or "default")
