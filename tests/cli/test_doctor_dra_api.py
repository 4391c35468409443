"""`doctor` in DRA mode against the API: the node's ResourceSlices in the in-memory API server
(behind the same seam as the real client), compared with what the driver builds from the scan;
the real client against an address where nothing listens; and the command line."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from kae_deviceplugin.apiserver.seam import ApiServer
from kae_deviceplugin.cli import doctor
from kae_deviceplugin.cli.checks import Row, Status
from kae_deviceplugin.cli.main import main
from kae_deviceplugin.errors import ApiError
from tests.cli.dra_node import HPRE_0, NODE, SEC_0, by_check, dra_node

FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"


def slice_rows(rows: list[Row]) -> list[Row]:
    return by_check(rows)["dra slices"]


def test_the_pool_as_the_driver_builds_it_passes() -> None:
    """The slices build_slices makes from this node's scan: one ok row naming the generation."""
    with dra_node() as node:
        node.publish()
        (row,) = slice_rows(node.check())
        assert row.status is Status.OK and f"pool {NODE} generation 1: 6 devices" in row.detail


def test_no_node_name_fails_before_asking_the_api() -> None:
    """No --node-name and no NODE_NAME: one failing row naming both, and no API client made."""
    with dra_node() as node:
        made: list[Path | None] = []

        def connect(config: Path | None) -> ApiServer:
            made.append(config)
            return node.api

        rows = doctor.run_checks(node.targets(node=None), connect)
        (row,) = slice_rows(rows)
        assert row.status is Status.FAIL and "--node-name" in row.fixes[0]
        assert "NODE_NAME" in row.fixes[0] and made == []


def test_a_forbidden_answer_names_the_cluster_role_verbs() -> None:
    """403 from the API server: the fix names each resource and verb the ClusterRole needs."""
    with dra_node() as node:
        node.publish()
        node.api.fail_next = ApiError("resourceslices is forbidden", status=403, reason="Forbidden")
        (row,) = slice_rows(node.check())
        assert row.status is Status.FAIL and "HTTP 403 Forbidden" in row.detail
        fix = row.fixes[0]
        assert (
            "resourceslices get, list, watch, create, update, patch, delete" in fix
        )  # the chart's
        assert "resourceclaims get" in fix and "nodes get" in fix


def test_an_unknown_node_is_told_apart_from_an_unpublished_pool() -> None:
    """No slices and no such Node: the node name is wrong. No slices for a known Node: the
    driver has not published (the fix points at the registration row)."""
    with dra_node() as node:
        (row,) = slice_rows(node.check())
        assert row.status is Status.FAIL and f"no node {NODE} in the API" in row.detail
        node.publish(slices=[])
        (row,) = slice_rows(node.check())
        assert row.status is Status.FAIL and "no ResourceSlice of kae.openfuyao.com" in row.detail
        assert "registration row" in row.fixes[0]


def test_missing_and_extra_devices_are_named() -> None:
    """A slice lacking a device the scan has, and listing one the scan lacks: both named."""
    with dra_node() as node:
        (body,) = node.slices()
        devices = body["spec"]["devices"]
        ghost = copy.deepcopy(devices[0])
        ghost["name"] = "hpre-0000-99-00-0"
        body["spec"]["devices"] = [d for d in devices if d["name"] != SEC_0] + [ghost]
        node.publish([body])
        rows = slice_rows(node.check())
        assert [r.status for r in rows] == [Status.FAIL, Status.FAIL]
        assert "not published" in rows[0].detail and rows[0].detail.endswith(SEC_0)
        assert "not Healthy on this node" in rows[1].detail
        assert rows[1].detail.endswith("hpre-0000-99-00-0") and HPRE_0 not in rows[1].detail


def test_an_incomplete_or_mixed_generation_pool_fails() -> None:
    """A slice left at an older generation, and a resourceSliceCount the slices do not make."""
    with dra_node() as node:
        (current,) = node.slices(generation=2)
        (old,) = node.slices(generation=1)
        old["metadata"]["name"] = f"{NODE}-kae.openfuyao.com-1"
        current["spec"]["pool"]["resourceSliceCount"] = 3
        node.publish([current, old])
        rows = slice_rows(node.check())
        details = " | ".join(r.detail for r in rows)
        assert all(r.status is Status.FAIL for r in rows[:2])
        assert f"behind generation 2: {NODE}-kae.openfuyao.com-1" in details
        assert "1 slices, resourceSliceCount [3]" in details


def test_slices_of_another_pool_only_are_not_ours() -> None:
    """Slices for this node under another pool name (a driver run with another node name)."""
    with dra_node() as node:
        (body,) = node.slices()
        body["spec"]["pool"]["name"] = "other"
        node.publish([body])
        (row,) = slice_rows(node.check())
        assert row.status is Status.FAIL and f"no pool {NODE}, only ['other']" in row.detail


def _kubeconfig(path: Path, insecure: bool = False) -> Path:
    """A kubeconfig naming a local port where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path.write_text(
        json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "x", "cluster": {"server": f"https://127.0.0.1:{port}",
                                                   **({"insecure-skip-tls-verify": True}
                                                      if insecure else {})}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "x", "user": "u"}}],
        })
    )  # fmt: skip
    return path


def test_doctor_mode_dra_from_a_config_file_reaches_for_the_real_api(tmp_path: Path) -> None:
    """`doctor --config` with mode dra, the node name and a kubeconfig in the file: the DRA rows
    replace the device plugin's, and an API server nobody answers for is its own finding, naming
    the server's URL; no "pass --kubeconfig" when the file gave one."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"version: v1\nmode: dra\npaths:\n  kubeletRoot: {tmp_path}\n"
        f"dra:\n  nodeName: {NODE}\n  kubeconfig: {_kubeconfig(tmp_path / 'kubeconfig')}\n"
    )
    tree = FIXTURES / "kunpeng920-2p"
    args = ["doctor", "-o", "json", "--config", str(config), "--metrics-address", ""]
    args += ["--sysfs-root", str(tree / "sys"), "--dev-root", str(tree / "dev")]
    result = CliRunner().invoke(main, [*args, "--nfd-features-file", ""])
    assert result.exit_code == 1, result.output
    rows = {row["check"]: row for row in json.loads(result.stdout)["checks"]}
    assert "kubelet" not in rows and rows["dra registration"]["status"] == "fail"
    assert rows["dra slices"]["status"] == "fail"
    detail, fixes = rows["dra slices"]["detail"], rows["dra slices"]["fixes"]
    assert "not reachable" in detail and "at https://127.0.0.1:" in detail, rows["dra slices"]
    assert fixes[0].startswith("is the API server reachable from here")
    assert not any("--kubeconfig" in fix for fix in fixes)


def test_doctor_shows_tls_verification_turned_off(tmp_path: Path) -> None:
    """A kubeconfig with insecure-skip-tls-verify: true is a warning row of its own, naming the
    server, beside the slice check."""
    config = tmp_path / "config.yaml"
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", insecure=True)
    config.write_text(
        f"version: v1\nmode: dra\npaths:\n  kubeletRoot: {tmp_path}\n"
        f"dra:\n  nodeName: {NODE}\n  kubeconfig: {kubeconfig}\n"
    )
    tree = FIXTURES / "kunpeng920-2p"
    args = ["doctor", "-o", "json", "--config", str(config), "--metrics-address", ""]
    args += ["--sysfs-root", str(tree / "sys"), "--dev-root", str(tree / "dev")]
    result = CliRunner().invoke(main, [*args, "--nfd-features-file", ""])
    rows = {row["check"]: row for row in json.loads(result.stdout)["checks"]}
    assert rows["api tls"]["status"] == "warn", rows
    assert "TLS verification of https://127.0.0.1:" in rows["api tls"]["detail"]


def test_a_bad_mode_is_refused_as_serve_refuses_it() -> None:
    """--mode names the same choices as serve's; another word is exit 2 naming the flag."""
    result = CliRunner().invoke(main, ["doctor", "--mode", "both"])
    assert result.exit_code == 2 and "--mode" in result.stderr


def test_doctor_in_device_plugin_mode_loads_no_api_client_nor_dra() -> None:
    """The default mode's doctor, run whole in a fresh interpreter, imports neither the API
    seam nor the DRA modules; with --mode dra it does (so the test can fail), and no client
    library even then: the API client is the package's own."""
    tree = FIXTURES / "kunpeng920-2p"
    code = (
        "import json, sys\n"
        "from click.testing import CliRunner\n"
        "from kae_deviceplugin.cli.main import main\n"
        "CliRunner().invoke(main, ['doctor', '--metrics-address', '', '--nfd-features-file', '',\n"
        f"    '--sysfs-root', {str(tree / 'sys')!r}, '--dev-root', {str(tree / 'dev')!r},\n"
        "    '--kubelet-root', '/none', *sys.argv[1:]])\n"
        "names = ('kae_deviceplugin.apiserver', 'kae_deviceplugin.dra', 'lightkube', 'httpx2')\n"
        "print(json.dumps(sorted({m.split('.')[1 if m.startswith('kae') else 0]\n"
        "    for m in sys.modules if m.startswith(names)})))"
    )

    def loaded(*extra: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", code, *extra],
            check=False,
            capture_output=True,
            timeout=60,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        answer: list[str] = json.loads(done.stdout.splitlines()[-1])
        return answer

    assert loaded() == []
    assert loaded("--mode", "dra", "--node-name", NODE) == ["apiserver", "dra"]
