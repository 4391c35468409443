"""``kubectl kae devices``: one row per published device, with health, holders and queues."""

from __future__ import annotations

import json
from pathlib import Path

from kae_deviceplugin.dra import slice_devices
from kae_deviceplugin.kubectl import pool
from tests.kubectl.cluster import DRA_1, DRA_2, HPRE_0, SEC_0, ZIP_0, ZIP_2, dra_slices, kubectl_kae
from tests.support.http_apiserver import HttpApiServer

KEYS = ["node", "device", "engine", "function", "numaNode", "pciBusID", "healthy", "reasons",
        "claims", "queues"]  # fmt: skip


def _devices(api: HttpApiServer, tmp_path: Path, *args: str) -> list[dict[str, object]]:
    result = kubectl_kae(api, tmp_path, "devices", "-o", "json", *args)
    assert result.exit_code == 0, result.output
    found: list[dict[str, object]] = json.loads(result.stdout)
    return found


def test_json_has_exactly_the_documented_keys_and_the_holders(
    api: HttpApiServer, tmp_path: Path
) -> None:
    """worker-1's six devices; the held HPRE names its claim and pod and is granted its whole
    function (the total its claim's status data gives), the shared ZIP its queues claimed of
    its total, a free unshared device 0 of an unknown total (its slice has no queues)."""
    found = _devices(api, tmp_path, "--node", DRA_1)
    assert [d["device"] for d in found] == [
        HPRE_0, "hpre-0000-b9-00-0", SEC_0, "sec-0000-b6-00-0", ZIP_0, ZIP_2,
    ]  # fmt: skip
    assert all(list(d) == KEYS for d in found)
    assert found[0] == {
        "node": DRA_1, "device": HPRE_0, "engine": "hpre", "function": "pf", "numaNode": 0,
        "pciBusID": "0000:79:00.0", "healthy": True, "reasons": [],
        "claims": [{"namespace": "team-a", "name": "c1", "pods": ["app-1"]}],
        "queues": {"total": 256, "claimed": None, "granted": 256},
    }  # fmt: skip
    assert found[1]["queues"] == {"total": None, "claimed": None, "granted": 0}
    by_name = {d["device"]: d for d in found}
    assert by_name[ZIP_0]["queues"] == {"total": 256, "claimed": 8, "granted": 8}
    assert by_name[ZIP_0]["claims"] == [{"namespace": "team-b", "name": "z1", "pods": ["zipper"]}]
    assert by_name[ZIP_2]["queues"] == {"total": 256, "claimed": 0, "granted": 0}


def test_unhealthy_devices_carry_the_taints_reasons(api: HttpApiServer, tmp_path: Path) -> None:
    """The faults node: each device's reason is its unhealthy taint's value."""
    found = {d["device"]: d for d in _devices(api, tmp_path, "--node", DRA_2)}
    assert (found[SEC_0]["healthy"], found[SEC_0]["reasons"]) == (False, ["isolated"])
    assert found[HPRE_0]["reasons"] == ["engine-stopped"]
    assert (found[ZIP_2]["healthy"], found[ZIP_2]["numaNode"]) == (True, None)


def test_a_device_a_device_plugin_pod_holds_says_so(api: HttpApiServer, tmp_path: Path) -> None:
    """After a mode change the driver taints what a device-plugin pod still holds: healthy,
    with the held taint among its reasons."""
    for obj in dra_slices("kunpeng920-2p", "worker-9", held={SEC_0: "shop/old-app"}):
        api.seed("resourceslices", obj)
    found = {d["device"]: d for d in _devices(api, tmp_path, "--node", "worker-9")}
    assert found[SEC_0]["healthy"] is True
    assert found[SEC_0]["reasons"] == ["kae.openfuyao.com/held-by-device-plugin=shop.old-app"]


def test_the_table_shows_health_holders_and_queues(api: HttpApiServer, tmp_path: Path) -> None:
    """Every device of both DRA nodes, a header first; reasons in the health column."""
    result = kubectl_kae(api, tmp_path, "devices")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "NODE", "DEVICE", "ENGINE", "FUNCTION", "NUMA", "PCI", "HEALTH", "CLAIMS", "[PODS]",
        "QUEUES",
    ]  # fmt: skip
    assert len(lines) == 1 + 6 + 7
    assert lines[1].split() == [
        DRA_1, HPRE_0, "hpre", "pf", "0", "0000:79:00.0", "Healthy", "team-a/c1", "[app-1]",
        "256/256",
    ]  # fmt: skip
    assert lines[2].split()[-2:] == ["-", "-"]  # free, unshared: no total in the API
    assert lines[5].split()[-3:] == ["team-b/z1", "[zipper]", "8/256"]
    assert "Unhealthy (isolated)" in next(line for line in lines if DRA_2 in line and SEC_0 in line)


def test_the_plugin_reads_the_taint_keys_the_driver_writes() -> None:
    """The plugin restates the driver's taint keys (so it loads no gRPC): they must agree."""
    assert pool.UNHEALTHY_TAINT_KEY == slice_devices.UNHEALTHY_TAINT_KEY
    assert pool.HELD_TAINT_KEY == slice_devices.HELD_TAINT_KEY
    assert pool.NUMA_NODE == slice_devices.NUMA_NODE
    assert pool.PCI_BUS_ID == slice_devices.PCI_BUS_ID
