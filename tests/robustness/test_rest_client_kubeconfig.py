"""The kubeconfig as the project's client reads it, over real sockets: fields typed strictly
(a quoted "false" is no true), fields it cannot honour refused in one line, TLS verification
off said as a warning, ``tls-server-name`` honoured, proxies (the kubeconfig's ``proxy-url``,
the environment's HTTP(S)_PROXY and NO_PROXY) reached by CONNECT, and a server URL's
``user:password@`` never printed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.apiserver.rest_api import connect
from kae_deviceplugin.apiserver.seam import NODES
from kae_deviceplugin.errors import ApiError, KubeconfigError
from tests.support.apiserver_wire import Request
from tests.support.certificates import OPENSSL, Certificates, make_certificates
from tests.support.kubeconfigs import kubeconfig
from tests.support.raw_http import json_answer, serving

DEADLINE = 20.0
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command")


async def answer_node(request: Request, writer: Any) -> bool:
    writer.write(json_answer(200, NODE))
    return True


async def get_node(path: Path) -> Any:
    client = connect(path)
    try:
        async with asyncio.timeout(DEADLINE):
            return await client.get(NODES, "n1")
    except ApiError as err:
        return err
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("cluster", "user", "said"),
    [
        ({"insecure-skip-tls-verify": "false"}, {"token": "t"},
         "cluster k field insecure-skip-tls-verify is the string 'false'; write true or false"),
        ({"insecure-skip-tls-verify": True, "certificate-authority-data": "eA=="}, {"token": "t"},
         "sets both insecure-skip-tls-verify and a certificate authority"),
        ({}, {"token": 5}, "user u field token is a int, not a string"),
        ({}, {"auth-provider": {"name": "oidc"}}, "user u: auth-provider is not supported"),
        ({}, {"as-groups": ["a", "b"]}, "as-groups (impersonating groups) is not supported"),
        ({}, {"exec": {"apiVersion": "client.authentication.k8s.io/v2", "command": "x"}},
         "user u exec apiVersion 'client.authentication.k8s.io/v2' is none of"),
        ({}, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x",
                       "interactiveMode": "Always"}}, "interactiveMode Always needs a terminal"),
    ],
    ids=["quoted-false", "insecure-and-ca", "token-int", "auth-provider", "as-groups",
         "exec-version", "exec-interactive"],
)  # fmt: skip
def test_a_field_of_the_wrong_type_or_not_honoured_is_one_line_naming_it(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], said: str
) -> None:
    """Refused at start (exit 2: the file's content), one line naming the file and field."""
    path = kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1", cluster, user)
    with pytest.raises(KubeconfigError) as caught:
        connect(path)
    assert said in str(caught.value) and str(path) in str(caught.value)
    assert "\n" not in str(caught.value) and caught.value.exit_code == 2


@needs_openssl
def test_insecure_skip_tls_verify_is_a_warning_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``insecure-skip-tls-verify: true`` connects to a server no CA vouches for, and says at
    start, once, as a WARNING naming the server, that verification is off."""
    certs = make_certificates(tmp_path / "certs")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(certs.server_cert), str(certs.server_key))

    async def main() -> Any:
        async with serving(answer_node, context) as server:
            path = kubeconfig(tmp_path / "kc", server.url, {"insecure-skip-tls-verify": True},
                              {"token": "t"})  # fmt: skip
            with caplog.at_level(logging.WARNING):
                got = await get_node(path)
            return got, server.url

    got, url = asyncio.run(main())
    assert got["metadata"]["name"] == "n1"
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"TLS verification of {url} is off (insecure-skip-tls-verify" in warning


@needs_openssl
def test_tls_server_name_is_the_name_checked(tmp_path: Path) -> None:
    """The server's certificate names 127.0.0.1; reached as localhost with tls-server-name
    127.0.0.1 it is verified, without it the name does not match."""
    certs: Certificates = make_certificates(tmp_path / "certs")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(certs.server_cert), str(certs.server_key))

    async def main() -> tuple[Any, Any]:
        async with serving(answer_node, context) as server:
            url = server.url.replace("127.0.0.1", "localhost")
            ca = {"certificate-authority": str(certs.ca)}
            named = kubeconfig(tmp_path / "named", url, {**ca, "tls-server-name": "127.0.0.1"},
                               {"token": "t"})  # fmt: skip
            unnamed = kubeconfig(tmp_path / "unnamed", url, ca, {"token": "t"})
            return await get_node(named), await get_node(unnamed)

    named, unnamed = asyncio.run(main())
    assert named["metadata"]["name"] == "n1"
    assert isinstance(unnamed, ApiError) and "localhost" in str(unnamed)


@contextlib.asynccontextmanager
async def connect_proxy(port: int, seen: list[str]) -> AsyncIterator[str]:
    """An HTTP proxy that tunnels every CONNECT to 127.0.0.1:``port`` (whatever host it
    names), recording each request line and Proxy-Authorization."""
    tasks: set[asyncio.Future[Any]] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Closed however the pipe ends, its cancellation at the block's end too: a writer left
        # open is collected later, in whatever test runs then, as an unclosed transport.
        try:
            with contextlib.suppress(ConnectionError):
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
        finally:
            writer.close()

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            seen.append(" | ".join(line for line in head if line.startswith(("CONNECT", "Proxy-"))))
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
        except BaseException:
            writer.close()
            raise
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        both = [pipe(reader, upstream_writer), pipe(upstream_reader, writer)]
        task = asyncio.ensure_future(asyncio.gather(*both))
        tasks.add(task)
        await task

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    try:
        yield f"http://user:s3cret@127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def test_proxy_url_and_the_environment_proxies_are_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server named by a host only the proxy can reach (.invalid): reached through the
    kubeconfig's proxy-url, then through HTTP_PROXY; NO_PROXY naming the host bypasses it (and
    the name does not resolve: one line naming the server)."""
    seen: list[str] = []

    async def main() -> list[Any]:
        async with serving(answer_node) as server:
            port = int(server.url.rsplit(":", 1)[1])
            url = f"http://kae-api.invalid:{port}"
            async with connect_proxy(port, seen) as proxy:
                by_config = kubeconfig(tmp_path / "a", url, {"proxy-url": proxy}, {"token": "t"})
                plain = kubeconfig(tmp_path / "b", url, {}, {"token": "t"})
                got = [await get_node(by_config)]
                monkeypatch.setenv("HTTP_PROXY", proxy)
                got.append(await get_node(plain))
                monkeypatch.setenv("NO_PROXY", "example.com,.invalid")
                got.append(await get_node(plain))
                return got

    by_config, by_environment, bypassed = asyncio.run(main())
    assert by_config["metadata"]["name"] == by_environment["metadata"]["name"] == "n1"
    assert len(seen) == 2 and all(line.startswith("CONNECT kae-api.invalid:") for line in seen)
    assert all("Proxy-Authorization: Basic dXNlcjpzM2NyZXQ=" in line for line in seen)
    assert isinstance(bypassed, ApiError) and "kae-api.invalid" in str(bypassed)


def test_a_password_in_the_server_url_is_never_printed(tmp_path: Path) -> None:
    """A server URL with user:password@, unreachable: the error names the server without
    them; so does a refusal at start."""
    path = kubeconfig(tmp_path / "kc", "http://admin:pa55word@127.0.0.1:1", {}, {"token": "t"})
    err = asyncio.run(get_node(path))
    assert isinstance(err, ApiError) and "http://127.0.0.1:1" in str(err)
    assert "pa55word" not in str(err) and "admin" not in str(err)
    bad = kubeconfig(tmp_path / "bad", "ftp://admin:pa55word@h/", {}, {"token": "t"})
    with pytest.raises(KubeconfigError) as caught:
        connect(bad)
    assert "pa55word" not in str(caught.value)
