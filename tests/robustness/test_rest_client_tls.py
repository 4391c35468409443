"""The driver's own API client over TLS, against a server that requires a client certificate:
the cluster's CA from a file or from its data, the user's certificate from files or from data,
and the refusals when the client does not trust the server or has no certificate."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import socket
import ssl
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.apiserver.credentials import from_service_account
from kae_deviceplugin.apiserver.rest_api import RestApi, connect
from kae_deviceplugin.apiserver.seam import NODES
from kae_deviceplugin.errors import UNREACHABLE, ApiError, KubeconfigError
from tests.support.apiserver_wire import Request
from tests.support.certificates import OPENSSL, Certificates, make_certificates
from tests.support.kubeconfigs import kubeconfig
from tests.support.raw_http import json_answer, serving

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command")
DEADLINE = 10.0
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


def server_context(certs: Certificates, client_certificate: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs.ca))
    context.load_cert_chain(str(certs.server_cert), str(certs.server_key))
    context.verify_mode = ssl.CERT_REQUIRED if client_certificate else ssl.CERT_NONE
    return context


def data(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def respond(request: Request, writer: Any) -> bool:
    writer.write(json_answer(200, NODE))
    return True


def get_node(certs: Certificates, tmp_path: Path, cluster: Any, user: Any) -> Any:
    """A GET of the Node through a client made from the kubeconfig: its answer, or ApiError."""

    async def main() -> Any:
        async with serving(respond, server_context(certs)) as server:
            path = kubeconfig(tmp_path / "kubeconfig", server.url, cluster(certs), user(certs))
            client = connect(path)
            try:
                async with asyncio.timeout(DEADLINE):
                    return await client.get(NODES, "n1")
            except ApiError as err:
                return err
            finally:
                await client.close()

    return asyncio.run(main())


def files(certs: Certificates) -> dict[str, str]:
    return {"client-certificate": str(certs.client_cert), "client-key": str(certs.client_key)}


def embedded(certs: Certificates) -> dict[str, str]:
    return {
        "client-certificate-data": data(certs.client_cert),
        "client-key-data": data(certs.client_key),
    }


@pytest.mark.parametrize(
    ("cluster", "user"),
    [
        (lambda c: {"certificate-authority": str(c.ca)}, files),
        (lambda c: {"certificate-authority-data": data(c.ca)}, embedded),
    ],
    ids=["files", "data"],
)
def test_a_ca_and_a_client_certificate_are_a_verified_connection(
    certificates: Certificates, tmp_path: Path, cluster: Any, user: Any
) -> None:
    assert get_node(certificates, tmp_path, cluster, user)["metadata"]["name"] == "n1"


def test_a_server_the_ca_does_not_vouch_for_is_refused(
    certificates: Certificates, tmp_path: Path
) -> None:
    """Another CA than the server's: the handshake fails, an unreachable ApiError naming the
    verification, never an answer."""
    other = make_certificates(tmp_path / "other")
    err = get_node(certificates, tmp_path, lambda c: {"certificate-authority": str(other.ca)},
                   files)  # fmt: skip
    assert isinstance(err, ApiError) and err.reason == UNREACHABLE
    assert "SSLCertVerificationError" in str(err), err


def test_without_a_client_certificate_the_server_refuses_the_handshake(
    certificates: Certificates, tmp_path: Path
) -> None:
    err = get_node(certificates, tmp_path, lambda c: {"certificate-authority": str(c.ca)},
                   lambda c: {"token": "t"})  # fmt: skip
    assert isinstance(err, ApiError) and err.reason == UNREACHABLE, err


def test_a_ca_file_that_is_no_certificate_is_a_kubeconfig_error(tmp_path: Path) -> None:
    """The TLS context cannot be made: KubeconfigError naming the file and the server."""
    (tmp_path / "ca.crt").write_text("not a certificate\n")
    path = kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1",
                      {"certificate-authority": "ca.crt"}, {"token": "t"})  # fmt: skip
    with pytest.raises(KubeconfigError) as caught:
        connect(path)
    assert str(caught.value).startswith(f"{path}: no client for https://127.0.0.1:1 can be made")
    assert caught.value.exit_code == 2


def test_the_service_account_trusts_its_ca_and_sends_its_token(
    certificates: Certificates, tmp_path: Path
) -> None:
    """A pod's account directory (ca.crt, token): the server is verified against that CA and
    the token read from the file is the bearer."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    account.joinpath("ca.crt").write_bytes(certificates.ca.read_bytes())
    account.joinpath("token").write_text("pod-token\n")

    async def main() -> list[str]:
        async with serving(respond, server_context(certificates, False)) as server:
            client = RestApi(from_service_account(server.url, account))
            try:
                async with asyncio.timeout(DEADLINE):
                    assert (await client.get(NODES, "n1"))["metadata"]["name"] == "n1"
            finally:
                await client.close()
            return [r.headers["authorization"] for _, r in server.requests]

    assert asyncio.run(main()) == ["Bearer pod-token"]


def test_a_closed_client_leaves_no_socket_open_even_when_its_loop_ends_at_once(
    certificates: Certificates, tmp_path: Path
) -> None:
    """A server that never answers the client's TLS close: once ``close`` returns, the client's
    sockets are closed, so a loop closed right after (as a test's or a driver's shutdown does)
    leaks none. A TLS shutdown waiting on the server would leave them to the collector, which
    warns of each."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    done = threading.Event()
    thread = threading.Thread(target=silent_closer, args=(listener, certificates, done))
    thread.start()
    trusted = {"certificate-authority": str(certificates.ca)}
    path = kubeconfig(
        tmp_path / "kubeconfig", f"https://127.0.0.1:{port}", trusted, files(certificates)
    )

    async def main() -> None:
        client = connect(path)
        async with asyncio.timeout(DEADLINE):
            await client.get(NODES, "n1")
        await client.close()

    leaked: list[str] = []
    hook = sys.unraisablehook
    sys.unraisablehook = lambda raised: leaked.append(repr(raised.exc_value))
    try:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(main())
        loop.close()
        gc.collect()
    finally:
        sys.unraisablehook = hook
        done.set()
        thread.join(DEADLINE)
        listener.close()
    assert leaked == []


def silent_closer(listener: socket.socket, certs: Certificates, done: threading.Event) -> None:
    """Answer one GET with the Node, then hold the connection without a close_notify back."""
    connection, _ = listener.accept()
    with server_context(certs).wrap_socket(connection, server_side=True) as tls:
        request = b""
        while b"\r\n\r\n" not in request:
            request += tls.recv(4096)
        body = json.dumps(NODE).encode()
        tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        done.wait(DEADLINE)
