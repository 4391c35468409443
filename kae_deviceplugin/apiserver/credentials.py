"""Where the API server is and who we are to it: a kubeconfig's current context, or the pod's
service account, made into an ``Endpoint`` (with its TLS context) and an ``Authorization``.

What a kubeconfig can say and the driver honours: the cluster's ``server`` (with a path prefix,
as a proxy serves it), ``certificate-authority`` or its ``-data``, ``insecure-skip-tls-verify``,
``tls-server-name``, ``proxy-url`` (else the environment's proxy); the user's ``token``,
``tokenFile``, ``client-certificate``/``client-key`` or their ``-data``, an ``exec`` plugin
(``exec_plugin``), ``username``/``password``, ``as``. What it cannot honour is refused when the
file is loaded (``kubeconfig_fields``). A relative file is read beside the kubeconfig, as
kubectl reads it. A token file (the service account's is rotated by the kubelet) is read again
every minute and after a 401; an exec plugin's credential is kept until its expiry or a 401.
The server's URL keeps no ``user:password@`` for messages."""

from __future__ import annotations

import asyncio
import base64
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kae_deviceplugin.apiserver.exec_plugin import CredentialError, ExecPlugin
from kae_deviceplugin.apiserver.http1 import Endpoint, Proxy
from kae_deviceplugin.apiserver.kubeconfig import SERVICE_ACCOUNT_DIR, redacted

__all__ = ["Authorization", "CredentialError", "Target", "from_kubeconfig", "from_service_account"]


if TYPE_CHECKING:
    import ssl

TOKEN_FILE_TTL = 60.0  # a token file is read again after this, as client-go does (and after a 401)
EARLY = 10.0  # an expiring credential is fetched anew this long before its time

Credential = tuple[str | None, float | None]  # the header (None: none) and until when (Unix time)


class Authorization:
    """The ``Authorization`` header: ``fixed``, or what ``fetch`` reads, kept until it expires
    or a 401. Concurrent callers share one fetch (one exec plugin run, one file read)."""

    def __init__(
        self, fixed: str | None = None, fetch: Callable[[], Awaitable[Credential]] | None = None
    ) -> None:
        self._current = fixed
        self._fetch = fetch
        self._valid_until: float | None = None if fetch is None else -math.inf
        self._lock = asyncio.Lock()

    async def header(self) -> str | None:
        if self._fetch is None:
            return self._current
        async with self._lock:
            if self._valid_until is not None and time.time() >= self._valid_until - EARLY:
                self._current, expires = await self._fetch()
                # One already (nearly) expired is still used for the request that asked.
                floor = time.time() + EARLY + 1.0
                self._valid_until = None if expires is None else max(expires, floor)
        return self._current

    async def refresh(self, used: str | None = None) -> bool:
        """After a 401 to ``used``: whether asking again can be answered otherwise (a new
        credential is fetched, once for every caller that met the same 401)."""
        if self._fetch is None:
            return False
        async with self._lock:
            if self._current == used:
                self._valid_until = -math.inf
        await self.header()
        return True


@dataclass(frozen=True, slots=True)
class Target:
    """An API server to talk to: its URL (for messages), address, path prefix and our header."""

    server: str
    endpoint: Endpoint
    prefix: str
    authorization: Authorization
    insecure: bool = False  # the kubeconfig turned TLS verification off
    impersonate: str | None = None  # the user's ``as``: Impersonate-User


def from_kubeconfig(
    config: Mapping[str, Any], server: str, path: Path, *, show_stderr: bool = False
) -> Target:
    """The current context of a kubeconfig ``load_kubeconfig`` has checked; ``ValueError``,
    ``OSError`` or ``ssl.SSLError`` for what it names that cannot be used. ``show_stderr``:
    an exec plugin's stderr goes to ours (a person's terminal), else nowhere."""
    context = _entry(config, "contexts", config["current-context"], "context")
    cluster = _entry(config, "clusters", context["cluster"], "cluster")
    user = _entry(config, "users", context["user"], "user")
    beside = path.parent

    def file(name: str) -> Path:
        return beside / Path(name).expanduser()  # an absolute name stays as it is

    tls = None
    insecure = cluster.get("insecure-skip-tls-verify") is True
    if urlsplit(server).scheme.lower() == "https":
        tls = _tls_context(cluster, file)
        _client_certificate(tls, user, file)
    proxy = None
    if cluster.get("proxy-url"):
        from kae_deviceplugin.apiserver.proxy import proxy_from_url  # noqa: PLC0415

        proxy = proxy_from_url(cluster["proxy-url"], "proxy-url")
    endpoint = _endpoint(server, tls, cluster.get("tls-server-name"), proxy)
    exec_spec = user.get("exec")
    auth = _user_auth(user, file)
    if isinstance(exec_spec, Mapping) and not user.get("tokenFile") and not user.get("token"):
        auth = Authorization(
            fetch=_exec_credential(ExecPlugin(exec_spec, cluster, show_stderr=show_stderr), tls)
        )
    return Target(redacted(server), endpoint, _prefix(server), auth, insecure, user.get("as"))


def from_service_account(server: str, directory: Path = SERVICE_ACCOUNT_DIR) -> Target:
    """The pod's identity: the token file (rotated by the kubelet) and the cluster's CA."""
    import ssl  # noqa: PLC0415 -- in a pod only: a plain-http client never loads OpenSSL

    tls = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    token = directory / "token"
    auth = Authorization(fetch=_file_token(token))
    return Target(server, _endpoint(server, tls, None, None), "", auth)


def _entry(config: Mapping[str, Any], section: str, name: str, key: str) -> Mapping[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            found = entry.get(key)
            return found if isinstance(found, Mapping) else {}
    raise ValueError(f"{section} has no {name}")  # load_kubeconfig has checked: not reached


def _endpoint(
    server: str, tls: ssl.SSLContext | None, server_name: str | None, proxy: Proxy | None
) -> Endpoint:
    """Where ``server`` listens; through ``proxy`` (the kubeconfig's), else the environment's
    (HTTPS_PROXY, NO_PROXY), as client-go reaches it."""
    url = urlsplit(server)
    scheme = url.scheme.lower()
    if scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"server {redacted(server)} is no http or https URL")
    port = url.port or (443 if scheme == "https" else 80)
    if proxy is None:
        from kae_deviceplugin.apiserver.proxy import proxy_from_environment  # noqa: PLC0415

        proxy = proxy_from_environment(scheme, url.hostname, port)
    return Endpoint(url.hostname, port, tls, server_name, proxy)


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
    if cluster.get("insecure-skip-tls-verify") is True:  # typed: a string is refused earlier
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
    _load_pair(context, cert, key)


def _load_pair(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
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
    """In the order kubectl's Python clients take them: a token file, a token, exec (made by
    the caller), basic."""
    if user.get("tokenFile"):
        return Authorization(fetch=_file_token(file(user["tokenFile"])))
    if user.get("token"):
        return Authorization(f"Bearer {user['token']}")
    if user.get("username") and user.get("password"):
        pair = f"{user['username']}:{user['password']}".encode()
        return Authorization(f"Basic {base64.b64encode(pair).decode('ascii')}")
    return Authorization()


def _file_token(path: Path) -> Callable[[], Awaitable[Credential]]:
    """The file's token, read again every ``TOKEN_FILE_TTL`` (the kubelet rotates it)."""

    async def read() -> Credential:
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError as err:
            raise CredentialError(f"token file {path}: {err.strerror or err}") from None
        return f"Bearer {token}", time.time() + TOKEN_FILE_TTL + EARLY

    return read


def _exec_credential(
    plugin: ExecPlugin, tls: ssl.SSLContext | None
) -> Callable[[], Awaitable[Credential]]:
    """The plugin's token (and certificate, loaded into ``tls`` for the next connections)."""

    async def run() -> Credential:
        got = await plugin.run()
        if got.cert is not None and got.key is not None:
            if tls is None:
                raise CredentialError("exec plugin gave a client certificate for a plain-http "
                                      "server")  # fmt: skip
            _load_pair(tls, got.cert, got.key)
        return (f"Bearer {got.token}" if got.token else None), got.expires

    return run
