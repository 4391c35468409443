"""doctor's runtime-CDI row: from the Node's runtime version (as the API server holds it) and
the runtime's config file, OK, FAIL with the setting to change, or SKIP saying why."""

from __future__ import annotations

from pathlib import Path

from kae_deviceplugin.apiserver.seam import NODES, ApiServer
from kae_deviceplugin.cli.checks import Status
from kae_deviceplugin.cli.doctor_cdi import check_runtime_cdi
from kae_deviceplugin.errors import ApiError
from tests.support.fake_apiserver import FakeApiServer


def _api(runtime: str) -> FakeApiServer:
    api = FakeApiServer()
    api.objects[(NODES.plural, None, "worker-1")] = {
        "metadata": {"name": "worker-1", "uid": "u"},
        "status": {"nodeInfo": {"containerRuntimeVersion": runtime}},
    }
    return api


def _connect(api: FakeApiServer):  # type: ignore[no-untyped-def]
    def connect(_kubeconfig: Path | None) -> ApiServer:
        return api

    return connect


def test_containerd_17_without_enable_cdi_fails_with_the_setting(tmp_path: Path) -> None:
    """containerd 1.7.35 whose config does not turn CDI on: FAIL naming enable_cdi, the file
    and device-plugin mode."""
    config = tmp_path / "config.toml"
    config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n')
    [row] = check_runtime_cdi("worker-1", None, config, _connect(_api("containerd://1.7.35")))
    assert row.status is Status.FAIL
    assert "enable_cdi = true" in row.detail and str(config) in row.detail
    assert "device-plugin" in row.detail


def test_containerd_2_passes(tmp_path: Path) -> None:
    """containerd 2 always applies CDI devices."""
    [row] = check_runtime_cdi(
        "worker-1", None, tmp_path / "x", _connect(_api("containerd://2.4.2"))
    )
    assert row.status is Status.OK and "containerd 2.4.2" in row.detail


def test_an_unreadable_node_or_unknown_runtime_skips() -> None:
    """No answer from the API server, or a runtime the driver does not know: SKIP, why said."""
    api = _api("docker://27.0.1")
    [row] = check_runtime_cdi("worker-1", None, None, _connect(api))
    assert row.status is Status.SKIP and "docker 27.0.1" in row.detail
    api.refuse["get"] = ApiError("API server not reachable")
    [row] = check_runtime_cdi("worker-1", None, None, _connect(api))
    assert row.status is Status.SKIP and "not reachable" in row.detail
