"""The API client's unused modules load on first use, and are then what a plain import gives."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from kae_deviceplugin.apiserver.deferred import API_CLIENT_UNUSED

CHECK = textwrap.dedent(
    """
    import sys
    from kae_deviceplugin.apiserver import lightkube_api  # imports the whole client
    from kae_deviceplugin.apiserver.deferred import API_CLIENT_UNUSED, executed

    waiting = [n for n in API_CLIENT_UNUSED if not executed(sys.modules[n])]
    assert waiting == list(API_CLIENT_UNUSED), waiting
    import yaml
    import lightkube.models.core_v1
    from lightkube.models import core_v1
    from lightkube.core.internal_resources import core_v1 as resources
    assert core_v1 is sys.modules["lightkube.models.core_v1"] is lightkube.models.core_v1
    assert not executed(yaml) and not executed(core_v1)
    assert yaml.safe_load("a: [1]") == {"a": [1]} and executed(yaml)
    assert core_v1.Pod.__module__ == "lightkube.models.core_v1" and executed(core_v1)
    assert resources.PodLog.__name__ == "PodLog"
    try:
        core_v1.NoSuchModel
    except AttributeError as err:
        assert "NoSuchModel" in str(err)
    else:
        raise AssertionError("a name the module lacks must raise AttributeError")
    print("ok")
    """
)


def test_the_client_leaves_its_unused_modules_unexecuted_until_used() -> None:
    """In a fresh interpreter (this one may have imported yaml already): importing the client
    runs none of them; ``import`` statements get the waiting module; the first name read runs
    it, with the module's own classes and errors."""
    done = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert "yaml" in API_CLIENT_UNUSED


def test_an_http_server_without_a_ca_gets_no_trust_store() -> None:
    """Plain http with no CA: the current cluster's TLS verification is off (the client never
    handshakes); https, or a CA named, keep their settings; the caller's dict is unchanged."""
    from kae_deviceplugin.apiserver.lightkube_api import _no_trust_store_for_http

    def config(server: str, **cluster: object) -> dict[str, object]:
        return {
            "current-context": "c",
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            "clusters": [
                {"name": "k", "cluster": {"server": server, **cluster}},
                {"name": "other", "cluster": {"server": "https://elsewhere"}},
            ],
        }

    plain = config("http://127.0.0.1:1")
    changed = _no_trust_store_for_http(plain, "http://127.0.0.1:1")
    assert changed["clusters"][0]["cluster"]["insecure-skip-tls-verify"] is True
    assert changed["clusters"][1] == plain["clusters"][1]  # type: ignore[index]
    assert plain == config("http://127.0.0.1:1")
    secure = config("https://127.0.0.1:1")
    assert _no_trust_store_for_http(secure, "https://127.0.0.1:1") is secure
    with_ca = config("http://127.0.0.1:1", **{"certificate-authority-data": "Zm9v"})
    assert _no_trust_store_for_http(with_ca, "http://127.0.0.1:1") is with_ca


JSON_KUBECONFIG = textwrap.dedent(
    """
    import json, sys, tempfile
    from pathlib import Path
    from kae_deviceplugin.apiserver import lightkube_api  # defers yaml
    from kae_deviceplugin.apiserver.deferred import executed
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
    assert not executed(sys.modules["yaml"]), "a JSON kubeconfig loaded PyYAML"
    path.write_text("{current-context: c}")  # YAML's flow style: not JSON, read by YAML
    try:
        load_kubeconfig(path)
    except Exception as err:
        assert "context c" in str(err), err
    assert executed(sys.modules["yaml"])
    print("ok")
    """
)


def test_a_json_kubeconfig_is_read_without_yaml() -> None:
    """JSON (which is YAML) is read by json; any other text, YAML's flow style included, by
    PyYAML as before (in a fresh interpreter, where yaml waits unexecuted)."""
    done = subprocess.run(
        [sys.executable, "-c", JSON_KUBECONFIG],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


# What `serve` never loads at rest: uevents come from a netlink socket of its own
# (daemon/uevents.py); malloc_trim is found without ctypes.util (daemon/memory.py); the bind
# directory is made without tempfile (kubelet/sockets.py); shutil waits for a directory to remove
# and secrets is not needed for a random tag (container/safe_fs.py). Each is ~0.2-1.5 MiB.
SERVE_NEVER_LOADS = ("pyudev", "ctypes.util", "tempfile", "shutil", "bz2", "lzma", "secrets")


def test_serve_loads_none_of_the_modules_it_does_without() -> None:
    """In a fresh interpreter, everything `serve` imports (its CLI and the daemon) and opening the
    uevent socket leave the listed modules unloaded."""
    code = textwrap.dedent(
        f"""
        import sys
        import kae_deviceplugin.cli.main, kae_deviceplugin.daemon.run
        from kae_deviceplugin.daemon.hotplug import open_uacce_monitor
        try:
            open_uacce_monitor().close()
        except OSError:
            pass  # a sandbox without netlink: the imports are what is checked
        print([m for m in {SERVE_NEVER_LOADS!r} if m in sys.modules])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
