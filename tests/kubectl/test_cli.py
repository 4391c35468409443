"""The plugin as a program: credentials as kubectl finds them, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kae_deviceplugin.apiserver.rest_reads import kubeconfig_paths
from kae_deviceplugin.kubectl.main import cli
from tests.kubectl.cluster import REPO, kubectl_kae
from tests.support.http_apiserver import HttpApiServer, write_kubeconfig


def test_the_module_runs_as_the_console_script_does(api: HttpApiServer, tmp_path: Path) -> None:
    """``python -m kae_deviceplugin.kubectl`` (what the kubectl-kae script calls) in a process
    of its own, with KUBECONFIG naming the file as kubectl users set it."""
    kubeconfig = api.kubeconfig(tmp_path / "config")
    env = {"KUBECONFIG": f"{tmp_path / 'missing'}:{kubeconfig}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin.kubectl", "nodes", "-o", "json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [n["node"] for n in json.loads(done.stdout)] == ["worker-1", "worker-2", "worker-3"]


def test_an_unreachable_server_is_one_line_naming_it(tmp_path: Path) -> None:
    """Exit 1 and one line on stderr with the server's URL and the cause; nothing on stdout."""
    with HttpApiServer() as api:
        kubeconfig = api.kubeconfig(tmp_path / "config")
        url = api.url
    result = CliRunner().invoke(cli, ["nodes", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("kubectl-kae: cannot read the cluster") and line.count(url) == 1
    assert "not reachable" in line


def test_a_refusal_names_the_server_and_the_status(api: HttpApiServer, tmp_path: Path) -> None:
    """A 403 on a list (read access missing) is exit 1 with the server's message."""
    api.faults.refuse("list", "resourceclaims", 403)
    result = kubectl_kae(api, tmp_path, "devices")
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("kubectl-kae: cannot read the cluster") and line.count(api.url) == 1
    assert "list resourceclaims refused by the test API server (Forbidden)" in line
    assert "403" in line


def test_a_pod_that_does_not_exist(api: HttpApiServer, tmp_path: Path) -> None:
    """The pod cannot be read: exit 1 naming it."""
    result = kubectl_kae(api, tmp_path, "why", "pod/ghost", "-n", "shop")
    assert result.exit_code == 1
    assert "get pods/ghost" in result.stderr and api.url in result.stderr


def test_the_contexts_namespace_is_the_default(api: HttpApiServer, tmp_path: Path) -> None:
    """Without -n, why looks in the context's namespace, as kubectl does; --context picks a
    context of the file."""
    config = json.loads(api.kubeconfig(tmp_path / "base").read_text())
    config["contexts"].append(
        {"name": "shop", "context": {"cluster": "test", "user": "driver", "namespace": "shop"}}
    )
    path = tmp_path / "config"
    path.write_text(json.dumps(config))
    args = ["why", "dp-app", "--kubeconfig", str(path), "-o", "json"]
    result = CliRunner().invoke(cli, [*args, "--context", "shop"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pod"] == "shop/dp-app"
    elsewhere = CliRunner().invoke(cli, args)  # the current context: namespace default
    assert elsewhere.exit_code == 1 and "get pods/dp-app" in elsewhere.stderr
    unknown = CliRunner().invoke(cli, [*args, "--context", "nope"])
    assert unknown.exit_code == 1 and "nope" in unknown.stderr


def test_kubeconfig_is_found_as_kubectl_finds_it(tmp_path: Path) -> None:
    """--kubeconfig wins; else KUBECONFIG's existing files, in order (merged); else none
    (in-cluster)."""
    first = write_kubeconfig(tmp_path / "a", "http://127.0.0.1:1", "t")
    second = write_kubeconfig(tmp_path / "b", "http://127.0.0.1:2", "t")
    listed = {"KUBECONFIG": f"{tmp_path / 'none'}:{second}:{first}", "HOME": str(tmp_path)}
    assert kubeconfig_paths(first, listed) == [first]
    assert kubeconfig_paths(None, listed) == [second, first]
    assert kubeconfig_paths(None, {"HOME": str(tmp_path)}) == []


def test_a_target_that_is_not_a_pod_is_a_usage_error(tmp_path: Path) -> None:
    """Exit 2, before anything is read."""
    result = CliRunner().invoke(cli, ["why", "deployment/web"])
    assert result.exit_code == 2
    assert "name a pod as pod/NAME" in result.stderr


def test_why_without_the_cel_library_is_one_line(
    api: HttpApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without cel-python, why exits 3 with what to install; nodes still works."""
    monkeypatch.setitem(sys.modules, "celpy", None)  # import celpy now raises ImportError
    result = kubectl_kae(api, tmp_path, "why", "pod/dp-app", "-n", "shop")
    assert result.exit_code == 3
    (line,) = result.stderr.splitlines()
    assert line.startswith("kubectl-kae: `why` needs the CEL library cel-python (")
    assert line.endswith("pip install 'kae-deviceplugin[kubectl]'")
    assert kubectl_kae(api, tmp_path, "nodes").exit_code == 0


def test_no_credentials_anywhere_is_one_line_saying_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --kubeconfig, no KUBECONFIG, no ~/.kube/config and not in a pod: exit 1, one line."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = CliRunner().invoke(cli, ["nodes"])
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "kubectl-kae: no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config) and no in-cluster "
        "service account ("
    )
