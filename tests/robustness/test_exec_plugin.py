"""A kubeconfig user's exec credential plugin and a token file, as the project's client runs
and reads them, with real processes and a real socket: a plugin that hangs is killed and said
in one line; its stderr (which may hold a token) is quoted nowhere; concurrent callers run it
once; it gets KUBERNETES_EXEC_INFO; its expiry is honoured and its client certificate used; a
token file is read again after a minute without waiting for a 401."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.apiserver import credentials, exec_plugin
from kae_deviceplugin.apiserver.rest_api import RestApi, connect
from kae_deviceplugin.apiserver.seam import NODES
from kae_deviceplugin.errors import ApiError
from tests.support.apiserver_wire import Request
from tests.support.certificates import OPENSSL, make_certificates
from tests.support.kubeconfigs import kubeconfig as one_context
from tests.support.raw_http import RawServer, json_answer, serving

DEADLINE = 30.0
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
V1 = "client.authentication.k8s.io/v1"


class Clock:
    """A stand-in for the ``time`` module of ``credentials``: the time the test says."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now


def plugin(tmp_path: Path, body: str, name: str = "plugin") -> Path:
    """An executable Python script; ``body`` runs with ``out`` (the plugin's directory)."""
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\nimport json, os, sys, time\n"
                    f"out = {str(tmp_path)!r}\n{body}\n")  # fmt: skip
    path.chmod(0o755)
    return path


def answer(status: dict[str, Any]) -> str:
    """The plugin's body printing an ExecCredential with ``status``."""
    credential = {"apiVersion": V1, "kind": "ExecCredential", "status": status}
    return f"print(json.dumps({credential!r}))"


def kubeconfig(path: Path, server: str, user: dict[str, Any], **cluster: Any) -> Path:
    return one_context(path, server, cluster, user)


def exec_user(command: Path, **more: Any) -> dict[str, Any]:
    return {"exec": {"apiVersion": V1, "command": str(command), **more}}


async def answer_node(request: Request, writer: Any) -> bool:
    writer.write(json_answer(200, NODE))
    return True


def with_client(
    tmp_path: Path, user: dict[str, Any], body: Any, tls: Any = None, **cluster: Any
) -> Any:
    async def main() -> Any:
        async with serving(answer_node, tls) as server:
            client = connect(kubeconfig(tmp_path / "kc", server.url, user, **cluster))
            try:
                async with asyncio.timeout(DEADLINE):
                    return await body(client, server)
            finally:
                await client.close()

    return asyncio.run(main())


def runs(tmp_path: Path) -> int:
    return len((tmp_path / "runs").read_text().splitlines())


def test_a_plugin_that_hangs_is_killed_and_said_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin that never answers: past EXEC_TIMEOUT the call is an ApiError saying the
    plugin gave no credential (not "API server not reachable"), and the process is gone."""
    monkeypatch.setattr(exec_plugin, "EXEC_TIMEOUT", 0.5)
    command = plugin(tmp_path, "open(f'{out}/pid', 'w').write(str(os.getpid()))\ntime.sleep(600)")

    async def body(client: RestApi, server: RawServer) -> ApiError:
        with pytest.raises(ApiError) as caught:
            await client.get(NODES, "n1")
        return caught.value

    err = with_client(tmp_path, exec_user(command), body)
    assert "no credentials: exec plugin" in str(err) and "within 0.5 s (killed)" in str(err)
    assert "not reachable" not in str(err)
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped: no such process, not even a zombie


def test_a_plugin_is_killed_when_its_caller_gives_up(tmp_path: Path) -> None:
    """The call waiting for a plugin is cancelled (the daemon stopping): the plugin is killed
    and reaped before the cancellation completes, none left behind."""
    command = plugin(tmp_path, "open(f'{out}/pid', 'w').write(str(os.getpid()))\ntime.sleep(600)")

    async def body(client: RestApi, server: RawServer) -> None:
        call = asyncio.create_task(client.get(NODES, "n1"))
        while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
            await asyncio.sleep(0.05)  # polled: the plugin's own file is the only event
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)

    with_client(tmp_path, exec_user(command), body)
    with pytest.raises(ProcessLookupError):
        os.kill(int((tmp_path / "pid").read_text()), 0)


def test_a_failing_plugins_stderr_is_quoted_nowhere(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A plugin that writes a token to stderr and fails: the error says its exit status,
    never what it wrote; the daemon's own stderr does not carry it either."""
    command = plugin(tmp_path, "sys.stderr.write('token: SECRET-abc123\\n')\nsys.exit(3)")

    async def body(client: RestApi, server: RawServer) -> ApiError:
        with pytest.raises(ApiError) as caught:
            await client.get(NODES, "n1")
        return caught.value

    err = with_client(tmp_path, exec_user(command), body)
    assert "exited with status 3" in str(err) and "SECRET" not in str(err)
    assert "SECRET" not in capfd.readouterr().err


def test_concurrent_callers_run_the_plugin_once_with_exec_info(tmp_path: Path) -> None:
    """Ten calls at once: one run, its token on every request; the plugin got
    KUBERNETES_EXEC_INFO (its apiVersion, not interactive, the cluster when asked) and no
    stdin."""
    command = plugin(tmp_path, "open(f'{out}/runs', 'a').write('run\\n')\n"
                     "open(f'{out}/info', 'w').write(os.environ['KUBERNETES_EXEC_INFO'])\n"
                     "time.sleep(0.3)\n" + answer({"token": "tok-1"}))  # fmt: skip

    async def body(client: RestApi, server: RawServer) -> None:
        await asyncio.gather(*(client.get(NODES, "n1") for _ in range(10)))
        tokens = {request.headers.get("authorization") for _, request in server.requests}
        assert tokens == {"Bearer tok-1"}

    user = exec_user(command, provideClusterInfo=True)
    with_client(tmp_path, user, body)
    assert runs(tmp_path) == 1
    info = json.loads((tmp_path / "info").read_text())
    assert info["apiVersion"] == V1 and info["kind"] == "ExecCredential"
    assert info["spec"]["interactive"] is False and info["spec"]["cluster"]["server"]


def test_an_expiring_credential_is_fetched_again_an_unexpiring_one_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token with an expirationTimestamp a minute ahead is kept within the minute and
    fetched anew after it; one without expiry is kept until a 401."""
    clock = Clock()
    monkeypatch.setattr(credentials, "time", clock)
    ahead = datetime.datetime.fromtimestamp(clock.now + 60, datetime.UTC)
    for expiry, expected_runs in ((ahead.strftime("%Y-%m-%dT%H:%M:%SZ"), 2), (None, 1)):
        clock.now = time.time()
        (tmp_path / "runs").write_text("")
        status = {"token": "t", **({"expirationTimestamp": expiry} if expiry else {})}
        command = plugin(tmp_path, "open(f'{out}/runs', 'a').write('run\\n')\n" + answer(status))

        async def body(client: RestApi, server: RawServer) -> None:
            for step in (0, 20, 60):
                clock.now += step
                await client.get(NODES, "n1")

        with_client(tmp_path, exec_user(command), body)
        assert runs(tmp_path) == expected_runs


@pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command")
def test_a_plugins_client_certificate_is_used(tmp_path: Path) -> None:
    """A server that requires a client certificate, and a plugin that answers with one (no
    token): the call succeeds with it."""
    certs = make_certificates(tmp_path / "certs")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs.ca))
    context.load_cert_chain(str(certs.server_cert), str(certs.server_key))
    context.verify_mode = ssl.CERT_REQUIRED
    status = {"clientCertificateData": certs.client_cert.read_text(),
              "clientKeyData": certs.client_key.read_text()}  # fmt: skip
    command = plugin(tmp_path, answer(status))
    ca = base64.b64encode(certs.ca.read_bytes()).decode()

    async def body(client: RestApi, server: RawServer) -> Any:
        return await client.get(NODES, "n1")

    got = with_client(tmp_path, exec_user(command), body, context,
                      **{"certificate-authority-data": ca})  # fmt: skip
    assert got["metadata"]["name"] == "n1"


def test_a_token_file_is_read_again_after_a_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token file changes: within the minute the old token is sent, after it the new one,
    without a 401 in between."""
    clock = Clock()
    monkeypatch.setattr(credentials, "time", clock)
    token = tmp_path / "token"
    token.write_text("old")

    async def body(client: RestApi, server: RawServer) -> list[str]:
        await client.get(NODES, "n1")
        token.write_text("new")
        clock.now += 30
        await client.get(NODES, "n1")
        clock.now += 31
        await client.get(NODES, "n1")
        return [request.headers["authorization"] for _, request in server.requests]

    sent = with_client(tmp_path, {"tokenFile": str(token)}, body)
    assert sent == ["Bearer old", "Bearer old", "Bearer new"]
