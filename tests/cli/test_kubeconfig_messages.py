"""Kubeconfigs that give no API client, as an operator writes them: each a real file (or
directory) on disk, each refused in one line naming it and what is wrong, with the documented
exit code; ``serve --mode dra`` and ``doctor --mode dra`` say the same, and suggest passing
``--kubeconfig`` only where none was passed."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kae_deviceplugin.apiserver.kubeconfig import check_service_account
from kae_deviceplugin.apiserver.rest_api import connect
from kae_deviceplugin.cli.demo import demo_settings
from kae_deviceplugin.cli.main import main
from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.daemon.run import build_for_mode
from kae_deviceplugin.errors import KubeconfigError, StartupError

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "sysfs_fixtures"
SERVER = "https://192.0.2.10:6443"  # TEST-NET-1: never reached, only named
CLUSTER = f"clusters: [{{name: k, cluster: {{server: '{SERVER}'}}}}]\n"
USERS = "users: [{name: u, user: {token: t}}]\n"
CONTEXT = "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
GOOD = f"apiVersion: v1\nkind: Config\ncurrent-context: c\n{CLUSTER}{CONTEXT}{USERS}"

# (what the file holds, what the message says after its path); None: a directory.
BAD_FILES: list[tuple[str | None, str]] = [
    ("", "is empty: a kubeconfig names a cluster, a user and a current-context"),
    (None, "is a directory, not a kubeconfig file"),
    ("- a\n- b\n", "is no kubeconfig: a YAML list where clusters, contexts and users belong"),
    ("clusters: [\n", "is not YAML"),
    (f"apiVersion: v1\n{CLUSTER}{CONTEXT}{USERS}", "sets no current-context"),
    (GOOD.replace("current-context: c", "current-context: other"),
     ": current-context names context other, which it does not define (it has: c)"),
    (GOOD.replace("cluster: k,", "cluster: gone,"),
     ": context c names cluster gone, which it does not define (it has: k)"),
    (GOOD.replace(", user: u}", "}"), ": context c names no user: the driver needs credentials"),
    (GOOD.replace(USERS, ""), ": context c names user u, which it does not define (it has: none)"),
    (GOOD.replace(f"server: '{SERVER}'", "certificate-authority: ca.crt"),
     ": cluster k has no server URL"),
    (GOOD.replace("}}]", ", certificate-authority: ca.crt}}]", 1),
     ": certificate-authority ca.crt is no file"),
]  # fmt: skip


def bad_kubeconfig(tmp_path: Path, content: str | None) -> Path:
    """The kubeconfig ``content`` as a file, or a directory where one belongs (None)."""
    path = tmp_path / "kubeconfig"
    if content is None:
        path.mkdir()
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize(("content", "said"), BAD_FILES)
def test_each_unusable_kubeconfig_is_one_line_naming_it(
    tmp_path: Path, content: str | None, said: str
) -> None:
    """No client from it: KubeconfigError, exit code 2 (the file the invocation named is no
    kubeconfig), one line that starts with the path and says what is wrong."""
    path = bad_kubeconfig(tmp_path, content)
    with pytest.raises(KubeconfigError) as caught:
        connect(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and said in message, message
    assert "\n" not in message and caught.value.exit_code == 2


def test_a_missing_kubeconfig_and_a_good_one(tmp_path: Path) -> None:
    """A path with nothing there: "does not exist", exit 2. A good file: a client whose
    errors will name the server's URL."""
    with pytest.raises(KubeconfigError, match="does not exist") as caught:
        connect(tmp_path / "nope")
    assert caught.value.exit_code == 2
    path = tmp_path / "good"
    path.write_text(GOOD)
    assert connect(path).server == SERVER


def test_an_unreadable_kubeconfig_is_the_nodes_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubeconfig the daemon's user cannot read (as a non-root user meets one of mode 0600
    owned by root; the refusal is made here, since root reads anything): exit 3, the
    environment's, naming the uid and the cause."""
    path = tmp_path / "kubeconfig"
    path.write_text(GOOD)

    def denied(self: Path, *args: object, **kwargs: object) -> str:
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(KubeconfigError) as caught:
        connect(path)
    assert str(caught.value) == (f"{path} cannot be read by uid {os.geteuid()}: Permission denied")
    assert caught.value.exit_code == 3


def test_no_service_account_names_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --kubeconfig: no token is exit 3 naming its path; a token without the API
    address variables names those; with both, the in-cluster URL."""
    with pytest.raises(KubeconfigError, match=f"no service account token {tmp_path}/token"):
        check_service_account(tmp_path)
    (tmp_path / "token").write_text("t")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubeconfigError, match="KUBERNETES_SERVICE_HOST unset") as caught:
        check_service_account(tmp_path)
    assert caught.value.exit_code == 3
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    assert check_service_account(tmp_path) == "https://[fd00::1]:443"


def dra_settings(tmp_path: Path, kubeconfig: Path | None) -> Settings:
    return dataclasses.replace(
        demo_settings(tmp_path), mode="dra", node_name="node-a", kubeconfig=kubeconfig
    )


def test_serve_names_the_flag_or_the_file_key_and_suggests_no_kubeconfig(
    tmp_path: Path,
) -> None:
    """serve --mode dra with an empty --kubeconfig: a StartupError "--kubeconfig <path> is
    empty", exit 2, without "pass --kubeconfig"; set in the config file, the file and its key
    are named instead of the flag."""
    path = bad_kubeconfig(tmp_path, "")
    with pytest.raises(StartupError) as caught:
        build_for_mode(dra_settings(tmp_path, path))
    assert str(caught.value).startswith(f"--kubeconfig {path} is empty")
    assert "pass --kubeconfig" not in str(caught.value) and caught.value.exit_code == 2
    config = tmp_path / "config.yaml"
    config.write_text(f"version: v1\nmode: dra\ndra:\n  nodeName: n\n  kubeconfig: {path}\n")
    source = ConfigSource(config, {})
    settings = dataclasses.replace(source.initial(), **demo_fields(tmp_path))
    with pytest.raises(StartupError) as caught:
        build_for_mode(settings, source)
    assert str(caught.value).startswith(f"{config}: dra.kubeconfig {path} is empty")


def demo_fields(tmp_path: Path) -> dict[str, Any]:
    """The demo's paths, so that nothing of the host is touched."""
    base = demo_settings(tmp_path)
    names = ("sysfs_root", "dev_root", "kubelet_root", "state_dir", "device_plugin_dir")
    return {name: getattr(base, name) for name in names}


def test_serve_with_a_directory_as_kubeconfig_in_a_subprocess(tmp_path: Path) -> None:
    """The real command, as an operator runs it: one line on stderr, exit 2, no traceback."""
    path = bad_kubeconfig(tmp_path, None)
    tree = FIXTURES / "kunpeng920-2p"
    done = subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", "serve", "--mode", "dra",
         "--node-name", "node-a", "--kubeconfig", str(path), "--metrics-address", "",
         "--sysfs-root", str(tree / "sys"), "--dev-root", str(tree / "dev"),
         "--kubelet-root", str(tmp_path), "--nfd-features-file", ""],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.strip()]
    assert f"--kubeconfig {path} is a directory, not a kubeconfig file" in line


def test_doctor_names_the_kubeconfig_and_does_not_ask_to_pass_one(tmp_path: Path) -> None:
    """doctor --mode dra with an empty --kubeconfig: the slices row fails naming the file; its
    fix is about that file, not "pass --kubeconfig"."""
    path = bad_kubeconfig(tmp_path, "")
    tree = FIXTURES / "kunpeng920-2p"
    args = ["doctor", "-o", "json", "--mode", "dra", "--node-name", "node-a"]
    args += ["--kubeconfig", str(path), "--kubelet-root", str(tmp_path)]
    args += ["--sysfs-root", str(tree / "sys"), "--dev-root", str(tree / "dev")]
    result = CliRunner().invoke(main, [*args, "--metrics-address", "", "--nfd-features-file", ""])
    rows = {row["check"]: row for row in json.loads(result.stdout)["checks"]}
    row = rows["dra slices"]
    assert row["status"] == "fail" and f"kubeconfig {path} is empty" in row["detail"], row
    assert not any("pass --kubeconfig" in fix for fix in row["fixes"]), row
