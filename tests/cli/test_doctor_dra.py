"""`doctor` in DRA mode on the node itself: the driver's registration socket (a real one, served
by the driver's own registration servicer), a device plugin beside it, the checkpoint and the
claims' CDI specs. The API-side checks are in test_doctor_dra_api.py."""

from __future__ import annotations

import asyncio
import json
import socket

from kae_deviceplugin.cli.checks import Status
from kae_deviceplugin.deviceplugin.servicer import socket_names as device_plugin_names
from kae_deviceplugin.dra.api import DRIVER, registration_names
from kae_deviceplugin.dra.checkpoint import CheckpointFile
from tests.cli.dra_node import (
    HPRE_0,
    SEC_0,
    UID_A,
    UID_B,
    by_check,
    checked,
    dra_node,
    registration,
)


def test_a_healthy_dra_node_passes_and_skips_the_device_plugin_checks() -> None:
    """Driver registered, pool published, one claim prepared with its spec: every row is ok,
    the hardware rows are there, and no row asks for the device plugin's kubelet.sock."""
    with dra_node() as node:
        node.publish()
        node.prepare(UID_A, "rsa", HPRE_0)

        async def scenario() -> None:
            async with registration(node):
                rows = await checked(node)
            statuses = {r.check: r.status for found in rows.values() for r in found}
            skipped = {check for check, status in statuses.items() if status is Status.SKIP}
            assert skipped == {"daemon", "nfd feature file"}  # no address, no file given
            assert set(statuses.values()) == {Status.OK, Status.SKIP}, rows
            assert {"hardware", "engine hpre", "uacce class", "/dev nodes"} <= set(rows)
            assert not {"kubelet", "plugin sockets", "pod-resources"} & set(rows)
            (reg,) = rows["dra registration"]
            assert "DRAPlugin kae.openfuyao.com" in reg.detail and "v1.DRAPlugin" in reg.detail

        asyncio.run(scenario())


def test_no_registry_directory_names_the_kubelet_root() -> None:
    """A kubelet root without plugins_registry: the row names the directory and --kubelet-root."""
    with dra_node() as node:
        (node.registry).rmdir()
        (row,) = by_check(node.check())["dra registration"]
        assert row.status is Status.FAIL and str(node.registry) in row.detail
        assert "--kubelet-root" in row.fixes[0]


def test_no_registration_socket_names_the_socket_the_driver_creates() -> None:
    """Nothing in plugins_registry: fail, with the fix naming serve --mode dra and the path."""
    with dra_node() as node:
        (row,) = by_check(node.check())["dra registration"]
        assert row.status is Status.FAIL and "no registration socket" in row.detail
        assert "serve --mode dra" in row.fixes[0]
        assert str(node.registry / f"{DRIVER}-reg.sock") in row.fixes[0]


def _stale(path: object) -> None:
    """A socket file left behind: bound once, its listener gone (connections are refused)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()


def test_a_stale_socket_fails_alone_and_warns_beside_a_live_driver() -> None:
    """A registration socket nobody answers on fails (fix: remove it); the same stale socket
    beside a live per-pod one (a rolling update's) is only a warning."""
    with dra_node() as node:
        stale = node.registry / f"{DRIVER}-reg.sock"
        _stale(stale)
        (row,) = by_check(node.check())["dra registration"]
        assert row.status is Status.FAIL and "does not answer GetInfo" in row.detail
        assert f"remove {stale}" in row.fixes[0]

        async def scenario() -> None:
            async with registration(
                node, f"{DRIVER}-8d1e2f3a-0000-4000-8000-00000000abcd-reg.sock"
            ):
                rows = (await checked(node))["dra registration"]
            assert sorted(r.status for r in rows) == sorted([Status.OK, Status.WARN])
            assert next(r for r in rows if r.status is Status.WARN).detail.startswith(str(stale))

        asyncio.run(scenario())


def test_a_file_in_the_socket_s_place_is_named() -> None:
    """A regular file with the registration socket's name is no socket: fail, remove it."""
    with dra_node() as node:
        (node.registry / f"{DRIVER}-reg.sock").write_text("")
        (row,) = by_check(node.check())["dra registration"]
        assert row.status is Status.FAIL and "is not a socket" in row.detail


def test_wrong_answers_to_getinfo_are_each_named() -> None:
    """Another plugin type or name, no DRAPlugin service, or an endpoint that is no socket."""
    with dra_node() as node:
        cases = [
            ({"plugin_type": "DevicePlugin"}, "answers as DevicePlugin"),
            ({"driver": "gpu.example.com"}, "not DRAPlugin 'kae.openfuyao.com'"),
            ({"versions": ("v1beta1",)}, "advertises v1beta1: none of v1.DRAPlugin"),
            ({"endpoint": node.plugin_dir / "gone.sock"}, "gone.sock, which is not a socket"),
        ]

        async def scenario() -> None:
            for kwargs, expected in cases:
                async with registration(node, **kwargs):  # type: ignore[arg-type]
                    (row,) = (await checked(node))["dra registration"]
                assert row.status is Status.FAIL and expected in row.detail, (kwargs, row)

        asyncio.run(scenario())


def test_a_device_plugin_beside_the_driver_warns_one_mode_per_node() -> None:
    """A kae socket in device-plugins/: a warning (exit 0 stays possible) naming the socket."""
    with dra_node() as node:
        (row,) = by_check(node.check())["one mode per node"]
        assert row.status is Status.OK
        plugins = node.kubelet / "device-plugins"
        plugins.mkdir()
        (plugins / "kae-hpre.sock").write_text("")
        (row,) = by_check(node.check())["one mode per node"]
        assert row.status is Status.WARN and str(plugins / "kae-hpre.sock") in row.detail
        assert "one mode per node" in row.fixes[0]


def test_a_damaged_checkpoint_fails_and_says_when_to_move_it_aside() -> None:
    """A checkpoint edited by hand (checksum mismatch) fails, naming the file; a newer version's
    fails with its own fix; neither is read further (no CDI row)."""
    with dra_node() as node:
        node.prepare(UID_A, "rsa", HPRE_0)
        path = CheckpointFile(node.plugin_dir).path
        document = json.loads(path.read_text())
        document["claims"][UID_A]["name"] = "edited"
        path.write_text(json.dumps(document))
        rows = by_check(node.check())
        (row,) = rows["dra checkpoint"]
        assert row.status is Status.FAIL and "checksum mismatch" in row.detail
        assert f"move {path} aside" in row.fixes[0] and "cdi specs" not in rows
        path.write_text(json.dumps({**document, "version": 99}))
        (row,) = by_check(node.check())["dra checkpoint"]
        assert row.status is Status.FAIL and "newer kae-deviceplugin" in row.detail


def test_no_checkpoint_is_fine_and_nothing_is_created() -> None:
    """A node where the driver never ran: no checkpoint is no claim, and doctor creates no
    directory (it only reads)."""
    with dra_node() as node:
        node.plugin_dir.rmdir()
        rows = by_check(node.check())
        assert rows["dra checkpoint"][0].status is Status.OK
        assert "0 prepared claims" in rows["dra checkpoint"][0].detail
        assert not node.plugin_dir.exists() and not node.cdi.exists()


def test_a_claim_without_its_cdi_spec_fails_and_an_orphan_spec_warns() -> None:
    """A checkpointed claim whose spec is gone fails, naming the claim and the file; a claim
    spec of no checkpointed claim warns; the device plugin's own spec and other vendors' are
    not ours to judge."""
    with dra_node() as node:
        node.prepare(UID_A, "rsa", HPRE_0, spec=False)
        node.cdi.mkdir()
        orphan = node.cdi / f"openfuyao.com-kae_{UID_B}.json"
        for name in (orphan.name, "openfuyao.com-kae.json", "nvidia.com-gpu_x.json"):
            (node.cdi / name).write_text("{}\n")
        rows = by_check(node.check())["cdi specs"]
        failed = [r for r in rows if r.status is Status.FAIL]
        warned = [r for r in rows if r.status is Status.WARN]
        assert len(failed) == 1 and f"claim team-a/rsa ({UID_A})" in failed[0].detail
        assert str(node.cdi / f"openfuyao.com-kae_{UID_A}.json") in failed[0].detail
        assert len(warned) == 1 and warned[0].detail.endswith(str(orphan))
        assert f"rm {orphan}" in warned[0].fixes[0]
        node.prepare(UID_B, "cipher", SEC_0)
        (row,) = by_check(node.check())["cdi specs"]
        assert row.status is Status.FAIL  # UID_A's spec is still missing; the orphan is held


def test_the_shortest_rolling_name_counts_only_when_it_answers_as_our_driver() -> None:
    """dra-<digest>-reg.sock, the name a pod takes under a long kubelet root, is upstream's
    for any driver: doctor checks it when GetInfo names our driver, and passes over another
    driver's socket of that form (no row for it: ours is then missing)."""
    uid = "6f1c1d2e-9a4b-4c3d-8e2f-1a2b3c4d5e6f"
    shortest = registration_names(uid)[2]
    with dra_node() as node:

        async def scenario() -> None:
            async with registration(node, shortest):
                (row,) = (await checked(node))["dra registration"]
            assert row.status is Status.OK and row.detail.startswith(str(node.registry / shortest))
            async with registration(node, shortest, driver="gpu.example.com"):
                (row,) = (await checked(node))["dra registration"]
            assert row.status is Status.FAIL and "no registration socket" in row.detail

        asyncio.run(scenario())


def test_a_device_plugin_socket_under_its_short_name_warns_one_mode_per_node() -> None:
    """The device plugin's 12-byte name (a long kubelet root) is its socket too."""
    with dra_node() as node:
        registry_name = device_plugin_names("openfuyao.com/kae.hpre")[1]
        (node.registry / registry_name).write_text("")
        (row,) = by_check(node.check())["one mode per node"]
        assert row.status is Status.WARN and registry_name in row.detail
