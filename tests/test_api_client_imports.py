"""The DRA driver's API client is our own: ``serve --mode dra`` loads no client library, and a
JSON kubeconfig (which is YAML) is read without PyYAML."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

LIBRARIES = ("lightkube", "httpx2", "httpx", "httpcore", "anyio", "h11", "msgspec", "yaml")

DRA_IMPORTS = textwrap.dedent(
    f"""
    import json, sys
    import kae_deviceplugin.cli.main
    import kae_deviceplugin.daemon.run_dra
    import kae_deviceplugin.cli.doctor_slices
    from kae_deviceplugin.apiserver import rest_api
    names = {LIBRARIES!r}
    print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set(names))))
    """
)

JSON_KUBECONFIG = textwrap.dedent(
    """
    import json, sys, tempfile
    from pathlib import Path
    from kae_deviceplugin.apiserver.kubeconfig import load_kubeconfig

    config = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    path = Path(tempfile.mkdtemp()) / "kubeconfig"
    path.write_text(json.dumps(config))
    assert load_kubeconfig(path) == (config, "http://127.0.0.1:1")
    assert "yaml" not in sys.modules, "a JSON kubeconfig loaded PyYAML"
    path.write_text("{current-context: c}")  # YAML's flow style: not JSON, read by YAML
    try:
        load_kubeconfig(path)
    except Exception as err:
        assert "context c" in str(err), err
    assert "yaml" in sys.modules
    print("ok")
    """
)


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_the_dra_driver_loads_no_api_client_library() -> None:
    """Its modules, the CLI and doctor's slice check, imported in a fresh interpreter: none of
    lightkube, httpx, httpcore, anyio or msgspec (no part of the project uses them)."""
    assert json.loads(_run(DRA_IMPORTS)) == []


def test_a_json_kubeconfig_is_read_without_yaml() -> None:
    """JSON (which is YAML) is read by json; any other text, YAML's flow style included, by
    PyYAML as before."""
    assert _run(JSON_KUBECONFIG) == "ok"
