"""`kubectl kae` as a program (``python -m kae_deviceplugin.kubectl``, the console script's
``main``) on the project's own client: what kubectl users pass (merged KUBECONFIG, --as,
--request-timeout, exec plugins of v1 and v1beta1), and every failure one line on stderr,
exit 1, no traceback, no secret: an empty kubeconfig, a missing user, a missing CA file,
auth-provider, a kubeconfig that is no YAML, a 200 that is no JSON, a 302 without
Content-Type, a server that never answers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kae_deviceplugin.apiserver import rest_reads
from kae_deviceplugin.apiserver.reads import NODES
from kae_deviceplugin.errors import ApiError
from tests.kubectl.cluster import REPO
from tests.support.apiserver_wire import Request
from tests.support.http_apiserver import TOKEN, HttpApiServer
from tests.support.raw_http import json_answer, serving

DEADLINE = 60.0
SECRET = "s3cret-token-value"


def kae(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin.kubectl", *args], cwd=REPO, env=environ,
        capture_output=True, text=True, timeout=DEADLINE, check=False,
    )  # fmt: skip


async def kae_async(*args: str) -> subprocess.CompletedProcess[str]:
    """``kae`` while this loop serves a raw server."""
    return await asyncio.to_thread(kae, *args)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line of stderr of a run that failed (exit 1), with no traceback or secret."""
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("kubectl-kae: ") and "Traceback" not in done.stderr
    assert SECRET not in done.stderr
    return line


def config(server: str, user: dict[str, Any], **cluster: Any) -> dict[str, Any]:
    return {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
    }


def written(path: Path, content: Any) -> Path:
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("", "is empty"),
        (config("http://127.0.0.1:1", {"token": SECRET}) | {"users": []},
         "names user u, which it does not define"),
        (config("https://127.0.0.1:1", {"token": SECRET}, **{"certificate-authority": "no.crt"}),
         "certificate-authority no.crt is no file"),
        (config("http://127.0.0.1:1", {"auth-provider": {"name": "oidc", "config": {
            "id-token": SECRET}}}), "auth-provider is not supported"),
        (f"users:\n- name: u\n  user:\n    token: {SECRET}\n   bad: [\n", "is not YAML"),
    ],
    ids=["empty", "missing-user", "missing-ca", "auth-provider", "not-yaml"],
)  # fmt: skip
def test_a_kubeconfig_that_cannot_be_used_is_one_line_without_its_secrets(
    tmp_path: Path, content: Any, said: str
) -> None:
    path = written(tmp_path / "config", content)
    line = one_line(kae("nodes", "--kubeconfig", str(path)))
    assert said in line and str(path) in line


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_an_exec_plugin_of_either_version_and_merged_kubeconfigs(
    tmp_path: Path, version: str
) -> None:
    """KUBECONFIG lists a missing file, one with the context and cluster, one with the user
    (an exec plugin): merged, they read the cluster."""
    plugin = tmp_path / "plugin"
    credential = {"apiVersion": f"client.authentication.k8s.io/{version}",
                  "kind": "ExecCredential", "status": {"token": TOKEN}}  # fmt: skip
    plugin.write_text(f"#!{sys.executable}\nprint({json.dumps(json.dumps(credential))})\n")
    plugin.chmod(0o755)
    exec_spec = {"apiVersion": f"client.authentication.k8s.io/{version}", "command": str(plugin)}
    with HttpApiServer() as api:
        whole = config(api.url, {"exec": exec_spec})
        first = written(tmp_path / "a", {**whole, "users": []})
        second = written(tmp_path / "b", {"users": whole["users"]})
        listed = os.pathsep.join(map(str, (tmp_path / "missing", first, second)))
        done = kae("nodes", "-o", "json", env={"KUBECONFIG": listed})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def _raw(answer: bytes, args: tuple[str, ...], tmp_path: Path) -> tuple[Any, list[Request]]:
    async def respond(request: Request, writer: Any) -> bool:
        if answer:
            writer.write(answer)
            return False
        await asyncio.Event().wait()  # never answers
        return False

    async def main() -> tuple[Any, list[Request]]:
        async with serving(respond) as server:
            path = written(tmp_path / "config", config(server.url, {"token": SECRET}))
            done = await kae_async("nodes", "--kubeconfig", str(path), *args)
            return done, [request for _, request in server.requests]

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 6\r\n\r\n<html>",
         "undecodable answer"),
        (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]',
         "a list answer without a list of items"),
        (b"HTTP/1.1 302 Found\r\nLocation: /login\r\nContent-Length: 0\r\n\r\n", "HTTP 302 Found"),
    ],
    ids=["html", "wrong-shape", "302"],
)  # fmt: skip
def test_an_answer_that_is_no_api_answer_is_one_line(
    tmp_path: Path, answer: bytes, said: str
) -> None:
    done, _ = _raw(answer, (), tmp_path)
    assert said in one_line(done)


def test_a_server_that_never_answers_ends_at_the_request_timeout_with_its_cause(
    tmp_path: Path,
) -> None:
    """--request-timeout 2s bounds the whole command; the line says what ran out."""
    done, requests = _raw(b"", ("--request-timeout", "2s", "--as", "jane"), tmp_path)
    assert "no complete answer within 2 s (--request-timeout)" in one_line(done)
    assert requests and all(r.headers.get("impersonate-user") == "jane" for r in requests)


def test_a_list_without_end_is_refused_past_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that always has another page (continue): the reader stops once past
    MAX_ITEMS objects (here 2,000) with one line, having asked pages of 500."""
    monkeypatch.setattr(rest_reads, "MAX_ITEMS", 2000)
    items = [{"metadata": {"name": f"n{i}", "uid": "u" * 100}} for i in range(500)]

    async def respond(request: Request, writer: Any) -> bool:
        page = int(request.query.get("continue", "0"))
        body = {"items": items, "metadata": {"continue": str(page + 1)}}
        writer.write(json_answer(200, body))
        return True

    async def main() -> tuple[str, list[Request]]:
        async with serving(respond) as server:
            path = written(tmp_path / "config", config(server.url, {"token": SECRET}))
            reads = rest_reads.connect_reads(rest_reads.Access(path))
            try:
                with pytest.raises(ApiError) as caught:
                    await reads.list_all(NODES)
            finally:
                await reads.close()
            return str(caught.value), [request for _, request in server.requests]

    said, requests = asyncio.run(main())
    assert said.startswith("list nodes at http://127.0.0.1:") and "\n" not in said
    assert "more than 2000 objects" in said
    assert [r.query["limit"] for r in requests] == ["500"] * 5


def test_server_and_token_flags_override_or_replace_the_kubeconfig(tmp_path: Path) -> None:
    """--server and --token in place of a kubeconfig's cluster URL and exec plugin (which
    would fail), and with no kubeconfig at all: the server sees the flag's token."""
    failing = tmp_path / "plugin"
    failing.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(1)\n")
    failing.chmod(0o755)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(failing)}}
    path = written(tmp_path / "config", config("http://127.0.0.1:1", user))
    with HttpApiServer() as api:
        flags = ("--server", api.url, "--token", TOKEN, "-o", "json")
        overriding = kae("nodes", "--kubeconfig", str(path), *flags)
        alone = kae("nodes", *flags)
    for done in (overriding, alone):
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == []
