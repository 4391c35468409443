"""Start-up failures of serve: one line naming the path, the cause and the fix; documented codes.

Each runs the real command in a subprocess, as an operator would, and reads its stderr.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from kae_deviceplugin.errors import StartupError
from kae_deviceplugin.kubelet.sockets import prepare_socket_dir
from kae_deviceplugin.testing.sysfs_builder import set_attribute
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import short_tmpdir

REPO = Path(__file__).resolve().parents[2]


def serve(
    *args: str, timeout: float = 60, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """Run ``kae-deviceplugin serve`` with the metrics endpoint and NFD file off (``prefix``:
    a command that runs it, such as ``unprivileged()``)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "kae_deviceplugin", "serve", "--metrics-address", "",
         "--nfd-features-file", "", "--registration", "kubelet-socket", *args],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO,
    )  # fmt: skip


def unprivileged() -> list[str]:
    """A command prefix under which serve may not read a directory its user has no rights to:
    nothing for a non-root user; for root, setpriv without the two capabilities that let root
    read anything (it stays root otherwise, so it can still run the interpreter)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv: no way to run serve unable to read a directory")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]


@contextmanager
def locked(directory: Path, mode: int) -> Iterator[None]:
    """``directory`` with ``mode``, owned by nobody (65534) when we are root, restored after."""
    before = directory.stat()
    if os.geteuid() == 0:
        os.chown(directory, 65534, 65534)
    directory.chmod(mode)
    try:
        yield
    finally:
        directory.chmod(stat.S_IMODE(before.st_mode))
        if os.geteuid() == 0:
            os.chown(directory, before.st_uid, before.st_gid)


def one_line(stderr: str) -> str:
    """The single line of stderr; fails the test on a traceback or on more lines."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_sysfs_root_that_does_not_exist_is_refused_with_exit_2(tmp_path: Path) -> None:
    """A mistyped --sysfs-root stops serve at once (it used to run forever with 0 devices)."""
    done = serve("--sysfs-root", str(tmp_path / "sys-typo"), "--dev-root", str(tmp_path))
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "--sysfs-root" in line and "sys-typo" in line and "does not exist" in line


def test_a_value_from_a_variable_is_named_as_the_variable(tmp_path: Path) -> None:
    """Without a config file too, a refusal names the KAE_DP_* variable that held the value
    (it used to name the flag, which the operator never wrote)."""
    done = subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", "serve", "--metrics-address", "",
         "--nfd-features-file", "", "--dev-root", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
        env={**os.environ, "KAE_DP_SYSFS_ROOT": str(tmp_path / "sys-typo")},
    )  # fmt: skip
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert f"KAE_DP_SYSFS_ROOT {tmp_path / 'sys-typo'} does not exist" in line
    assert "--sysfs-root" not in line


def test_a_file_where_the_socket_directory_should_be_is_one_line_with_exit_3() -> None:
    """--device-plugin-dir naming a file: the path, the cause and the fix, no traceback."""
    with short_tmpdir() as workdir:
        TREES["kunpeng920-2p"].build(workdir / "node")
        blocker = workdir / "device-plugins"
        blocker.write_text("")
        done = serve(
            "--sysfs-root", str(workdir / "node" / "sys"),
            "--dev-root", str(workdir / "node" / "dev"),
            "--device-plugin-dir", str(blocker),
            "--state-dir", str(workdir / "state"),
        )  # fmt: skip
        assert done.returncode == 3
        line = one_line(done.stderr)
        assert str(blocker) in line and "not a directory" in line


def test_a_socket_directory_below_a_file_is_one_line_with_exit_3() -> None:
    """A directory that cannot be created names itself and the fix."""
    with short_tmpdir() as workdir:
        TREES["kunpeng920-2p"].build(workdir / "node")
        (workdir / "file").write_text("")
        done = serve(
            "--sysfs-root", str(workdir / "node" / "sys"),
            "--dev-root", str(workdir / "node" / "dev"),
            "--device-plugin-dir", str(workdir / "file" / "dp"),
            "--state-dir", str(workdir / "state"),
        )  # fmt: skip
        assert done.returncode == 3
        line = one_line(done.stderr)
        assert "file/dp" in line and "cannot create the socket directory" in line
        assert "run as root" in line


def test_permission_denied_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As a non-root user (the image's default), mkdir fails: the message says what to do."""

    def denied(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", denied)
    with pytest.raises(StartupError) as caught:
        prepare_socket_dir(tmp_path / "dp", "device-plugins")
    message = str(caught.value)
    assert "permission denied" in message and "run as root" in message
    assert "device-plugins directory read-write" in message
    assert caught.value.exit_code == 3


def test_a_node_without_the_uacce_class_says_so_at_start() -> None:
    """No /sys/class/uacce: a warning naming it, then the per-engine summary with 0 devices."""
    with short_tmpdir() as workdir:
        (workdir / "sys").mkdir()
        (workdir / "dev").mkdir()
        process = subprocess.Popen(
            [sys.executable, "-m", "kae_deviceplugin", "serve", "--metrics-address", "",
             "--nfd-features-file", "", "--registration", "kubelet-socket",
             "--sysfs-root", str(workdir / "sys"), "--dev-root", str(workdir / "dev"),
             "--device-plugin-dir", str(workdir / "dp"), "--state-dir", str(workdir / "st")],
            stderr=subprocess.PIPE, text=True, cwd=REPO,
        )  # fmt: skip
        assert process.stderr is not None
        seen: list[str] = []
        try:
            for line in process.stderr:
                seen.append(line)
                if "found zip:" in line:
                    break
        finally:
            process.terminate()
            process.communicate(timeout=10)
        text = "".join(seen)
        assert "class/uacce does not exist" in text and "doctor" in text
        assert "found hpre: 0 devices (0 PFs, 0 VFs), 0 healthy, 0 unhealthy" in text


def test_demo_piped_into_head_ends_quietly() -> None:
    """`demo | head -1`: the first line, then no BrokenPipeError traceback, exit 0."""
    done = subprocess.run(
        f"{sys.executable} -m kae_deviceplugin demo | head -1",
        shell=True, capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        executable="/bin/bash",
    )  # fmt: skip
    assert done.stdout.startswith("Node 'kunpeng920-2p'")
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_demo_with_an_unknown_tree_errs_on_stderr_with_exit_2() -> None:
    """The error goes to stderr (it used to go to stdout), and the exit code is 2."""
    done = subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", "demo", "--tree", "nope"],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert "unknown tree 'nope'" in one_line(done.stderr)


@pytest.mark.parametrize(("below", "mode"), [("", 0o700), ("class", 0o700)], ids=["root", "class"])
def test_a_sysfs_root_this_user_cannot_read_is_one_line_with_exit_3(below: str, mode: int) -> None:
    """serve as a user that may not list the sysfs root, or search the class directory below
    it: one line naming --sysfs-root, the path and the cause (it was a PermissionError
    traceback), exit 3 as for any environment problem."""
    with short_tmpdir() as workdir:
        TREES["kunpeng920-2p"].build(workdir / "node")
        workdir.chmod(0o755)
        sysfs = workdir / "node" / "sys"
        with locked(sysfs / below if below else sysfs, mode):
            done = serve(
                "--sysfs-root", str(sysfs), "--dev-root", str(workdir / "node" / "dev"),
                "--device-plugin-dir", str(workdir / "dp"), "--state-dir", str(workdir / "st"),
                prefix=unprivileged(),
            )  # fmt: skip
        assert done.returncode == 3, done.stderr
        line = one_line(done.stderr)
        assert "--sysfs-root" in line and "permission denied" in line and "run as root" in line


def test_an_attribute_of_5000_digits_makes_the_device_unhealthy_not_the_daemon_exit() -> None:
    """The real serve reads available_instances holding a 5000-digit number (int() refuses
    past 4300): the device is added unhealthy, naming why, and the daemon goes on."""
    with short_tmpdir() as workdir:
        TREES["kunpeng920-2p"].build(workdir / "node")
        set_attribute(workdir / "node", "hisi_sec2-1", "available_instances", "9" * 5000)
        process = subprocess.Popen(
            [sys.executable, "-m", "kae_deviceplugin", "serve", "--metrics-address", "",
             "--nfd-features-file", "", "--registration", "kubelet-socket",
             "--sysfs-root", str(workdir / "node" / "sys"),
             "--dev-root", str(workdir / "node" / "dev"),
             "--device-plugin-dir", str(workdir / "dp"), "--state-dir", str(workdir / "st")],
            stderr=subprocess.PIPE, text=True, cwd=REPO,
        )  # fmt: skip
        assert process.stderr is not None
        seen: list[str] = []
        try:
            for line in process.stderr:
                seen.append(line)
                if "found zip:" in line or "Traceback" in line:
                    break
        finally:
            process.terminate()
            process.communicate(timeout=10)
        text = "".join(seen)
        assert "Traceback" not in text and "Exceeds the limit" not in text, text
        assert "hisi_sec2-1 at 0000:b6:00.0 (Unhealthy: available-instances-unreadable" in text
        assert process.returncode in (0, -15), text  # SIGTERM: handled, or before the handler
