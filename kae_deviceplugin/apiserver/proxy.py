"""Reaching the API server through an HTTP proxy, as client-go does: a kubeconfig cluster's
``proxy-url``, else ``HTTPS_PROXY`` (``HTTP_PROXY`` for a plain-http server) unless
``NO_PROXY`` names the host. The connection is a tunnel (``CONNECT host:port``) through which
TLS runs end to end, so the proxy sees no request and no token; a plain-http server is reached
through the same tunnel. Only ``http://`` proxies: a ``socks5://`` or ``https://`` one is
refused in one line rather than bypassed.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from kae_deviceplugin.apiserver.http1 import ProtocolError, Proxy, parse_head

if TYPE_CHECKING:
    from kae_deviceplugin.apiserver.http1 import Endpoint


def proxy_from_url(url: str, where: str) -> Proxy:
    """A ``Proxy`` from ``url`` (``http://[user:password@]host[:port]``); ``ValueError`` naming
    ``where`` it came from (without the URL's credentials) for any other."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme.lower() != "http" or not parts.hostname:
        shown = f"{parts.scheme}://{parts.hostname or ''}"
        raise ValueError(f"{where} {shown} is no http:// proxy (the only kind this client uses)")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = f"Basic {base64.b64encode(pair).decode('ascii')}"
    return Proxy(parts.hostname, parts.port or 80, authorization)


def proxy_from_environment(
    scheme: str, host: str, port: int, environ: Mapping[str, str] | None = None
) -> Proxy | None:
    """The proxy the environment names for ``scheme://host:port``, or None (none set, or
    ``NO_PROXY`` names the host)."""
    env = os.environ if environ is None else environ
    names = ("HTTPS_PROXY", "https_proxy") if scheme == "https" else ("HTTP_PROXY", "http_proxy")
    url = next((env[name] for name in names if env.get(name)), None)
    if url is None or _bypassed(env.get("NO_PROXY") or env.get("no_proxy") or "", host, port):
        return None
    return proxy_from_url(url, names[0])


def _bypassed(no_proxy: str, host: str, port: int) -> bool:
    """Whether ``NO_PROXY`` (a comma list: ``*``, a domain and its subdomains, an IP, a CIDR,
    each optionally with ``:port``) names ``host``."""
    host = host.lower().strip("[]")
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        name, _, want_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if want_port and want_port != str(port):
            continue
        if _ip_matches(name.strip("[]"), host):
            return True
        domain = name.lstrip("*").lstrip(".")
        if domain and (host == domain or host.endswith(f".{domain}")):
            return True
    return False


def _ip_matches(entry: str, host: str) -> bool:
    import ipaddress  # noqa: PLC0415 -- only where NO_PROXY is set

    try:
        address = ipaddress.ip_address(host)
        return address in ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False


async def tunnel(
    endpoint: Endpoint, limit: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A stream to ``endpoint`` through its proxy: CONNECT, then TLS when the endpoint has it.
    ``ProtocolError`` when the proxy refuses (its status said, never its page)."""
    proxy = endpoint.proxy
    assert proxy is not None
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port, limit=limit)
    try:
        lines = [f"CONNECT {endpoint.authority} HTTP/1.1", f"Host: {endpoint.authority}"]
        if proxy.authorization:
            lines.append(f"Proxy-Authorization: {proxy.authorization}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        head = parse_head(await reader.readuntil(b"\r\n\r\n"))
        if head.status != 200:
            raise ProtocolError(
                f"proxy {proxy.host}:{proxy.port} refused the tunnel: HTTP {head.status}"
            )
        if endpoint.tls is not None:
            await writer.start_tls(endpoint.tls, server_hostname=endpoint.tls_name)
    except BaseException:
        writer.transport.abort()
        raise
    return reader, writer
