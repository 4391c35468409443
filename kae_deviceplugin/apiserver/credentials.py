"""Where the API server is and who we are to it: a kubeconfig's current context, or the pod's
service account, made into an ``Endpoint`` (with its TLS context) and an ``Authorization``.

What a kubeconfig can say and the driver honours: the cluster's ``server`` (with a path prefix,
as a proxy serves it), ``certificate-authority`` or its ``-data``, ``insecure-skip-tls-verify``;
the user's ``token``, ``tokenFile``, ``client-certificate``/``client-key`` or their ``-data``,
an ``exec`` plugin, ``username``/``password``. A relative file is read beside the kubeconfig, as
kubectl reads it. A token file (the service account's is rotated by the kubelet) and an exec
plugin's token are read on first use and again after a 401, never on every request.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kae_deviceplugin.apiserver.http1 import Endpoint
from kae_deviceplugin.apiserver.kubeconfig import SERVICE_ACCOUNT_DIR

if TYPE_CHECKING:
    import ssl

EXEC_VERSIONS = frozenset(
    f"client.authentication.k8s.io/{v}" for v in ("v1alpha1", "v1beta1", "v1")
)


class CredentialError(Exception):
    """A token that cannot be had now (its file gone, an exec plugin failing): said as is."""


class Authorization:
    """The ``Authorization`` header: ``fixed``, or what ``fetch`` reads, cached until a 401."""

    def __init__(
        self, fixed: str | None = None, fetch: Callable[[], Awaitable[str]] | None = None
    ) -> None:
        self._current = fixed
        self._fetch = fetch

    async def header(self) -> str | None:
        if self._current is None and self._fetch is not None:
            self._current = await self._fetch()
        return self._current

    async def refresh(self) -> bool:
        """Read the token again after a 401; whether asking again can be answered otherwise."""
        if self._fetch is None:
            return False
        self._current = await self._fetch()
        return True


@dataclass(frozen=True, slots=True)
class Target:
    """An API server to talk to: its URL (for messages), address, path prefix and our header."""

    server: str
    endpoint: Endpoint
    prefix: str
    authorization: Authorization


def from_kubeconfig(config: Mapping[str, Any], server: str, path: Path) -> Target:
    """The current context of a kubeconfig ``load_kubeconfig`` has checked; ``ValueError``,
    ``OSError`` or ``ssl.SSLError`` for what it names that cannot be used."""
    context = _entry(config, "contexts", config["current-context"], "context")
    cluster = _entry(config, "clusters", context["cluster"], "cluster")
    user = _entry(config, "users", context["user"], "user")
    beside = path.parent

    def file(name: str) -> Path:
        return beside / Path(name).expanduser()  # an absolute name stays as it is

    tls = None
    if urlsplit(server).scheme.lower() == "https":
        tls = _tls_context(cluster, file)
        _client_certificate(tls, user, file)
    return Target(server, _endpoint(server, tls), _prefix(server), _user_auth(user, file))


def from_service_account(server: str, directory: Path = SERVICE_ACCOUNT_DIR) -> Target:
    """The pod's identity: the token file (rotated by the kubelet) and the cluster's CA."""
    import ssl  # noqa: PLC0415 -- in a pod only: a plain-http client never loads OpenSSL

    tls = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    token = directory / "token"
    return Target(server, _endpoint(server, tls), "", Authorization(fetch=_file_token(token)))


def _entry(config: Mapping[str, Any], section: str, name: str, key: str) -> Mapping[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            found = entry.get(key)
            return found if isinstance(found, Mapping) else {}
    raise ValueError(f"{section} has no {name}")  # load_kubeconfig has checked: not reached


def _endpoint(server: str, tls: ssl.SSLContext | None) -> Endpoint:
    url = urlsplit(server)
    scheme = url.scheme.lower()
    if scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"server {server} is no http or https URL")
    port = url.port or (443 if scheme == "https" else 80)
    return Endpoint(url.hostname, port, tls)


def _prefix(server: str) -> str:
    return urlsplit(server).path.rstrip("/")


def _tls_context(cluster: Mapping[str, Any], file: Callable[[str], Path]) -> ssl.SSLContext:
    """Verification against the cluster's CA (a file or its data), else off where the
    kubeconfig says so, else the system's trust store."""
    import ssl  # noqa: PLC0415 -- https only

    if cluster.get("certificate-authority"):
        return ssl.create_default_context(cafile=str(file(cluster["certificate-authority"])))
    if cluster.get("certificate-authority-data"):
        pem = base64.b64decode(cluster["certificate-authority-data"]).decode("ascii")
        return ssl.create_default_context(cadata=pem)
    if cluster.get("insecure-skip-tls-verify"):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context()


def _client_certificate(
    context: ssl.SSLContext, user: Mapping[str, Any], file: Callable[[str], Path]
) -> None:
    """The user's certificate and key, from files or from data (written to a private temporary
    directory only while OpenSSL reads them: it loads a chain from files alone)."""
    cert = _pem(user, "client-certificate", file)
    if cert is None:
        return
    key = _pem(user, "client-key", file)
    if key is None:
        raise ValueError("client-certificate without client-key")
    import tempfile  # noqa: PLC0415 -- only a client certificate needs it

    with tempfile.TemporaryDirectory() as directory:
        cert_file, key_file = Path(directory, "cert.pem"), Path(directory, "key.pem")
        cert_file.write_bytes(cert)
        key_file.write_bytes(key)
        context.load_cert_chain(str(cert_file), str(key_file))


def _pem(user: Mapping[str, Any], key: str, file: Callable[[str], Path]) -> bytes | None:
    """``key``'s PEM bytes, from its ``-data`` (base64) or the file it names."""
    if user.get(f"{key}-data"):
        return base64.b64decode(user[f"{key}-data"])
    if user.get(key):
        return file(str(user[key])).read_bytes()
    return None


def _user_auth(user: Mapping[str, Any], file: Callable[[str], Path]) -> Authorization:
    """In the order kubectl's Python clients take them: a token file, a token, exec, basic."""
    if user.get("tokenFile"):
        return Authorization(fetch=_file_token(file(user["tokenFile"])))
    if user.get("token"):
        return Authorization(f"Bearer {user['token']}")
    if isinstance(user.get("exec"), Mapping):
        return Authorization(fetch=_exec_token(user["exec"]))
    if user.get("username") and user.get("password"):
        pair = f"{user['username']}:{user['password']}".encode()
        return Authorization(f"Basic {base64.b64encode(pair).decode('ascii')}")
    if user.get("auth-provider"):
        raise ValueError("auth-provider is not supported: use a token, a certificate or exec")
    return Authorization()


def _file_token(path: Path) -> Callable[[], Awaitable[str]]:
    async def read() -> str:
        try:
            return f"Bearer {path.read_text(encoding='utf-8').strip()}"
        except OSError as err:
            raise CredentialError(f"token file {path}: {err.strerror or err}") from None

    return read


def _exec_token(spec: Mapping[str, Any]) -> Callable[[], Awaitable[str]]:
    async def run() -> str:
        if spec.get("apiVersion") not in EXEC_VERSIONS:
            raise CredentialError(f"exec plugin apiVersion {spec.get('apiVersion')} unsupported")
        command = [str(spec.get("command")), *map(str, spec.get("args") or [])]
        env = dict(os.environ) | {e["name"]: e["value"] for e in spec.get("env") or []}
        try:
            process = await asyncio.create_subprocess_exec(
                *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await process.communicate()
        except OSError as failed:
            raise CredentialError(f"exec {command[0]}: {failed.strerror or failed}") from None
        if process.returncode != 0:
            said = err.decode(errors="replace").strip()
            raise CredentialError(f"exec {command[0]} returned {process.returncode}: {said}")
        try:
            return f"Bearer {json.loads(out)['status']['token']}"
        except (ValueError, KeyError, TypeError):
            raise CredentialError(f"exec {command[0]} printed no token") from None

    return run
