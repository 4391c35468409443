"""Preferred allocation, sharing, env and configuration reload, through the kubelet emulator."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2 as reg_pb
from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from kae_deviceplugin.api import pb, pb_grpc
from kae_deviceplugin.config.settings import EngineSettings, EnvSettings, Settings
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import DEADLINE, Node, running_node, short_tmpdir

HPRE, SEC, ZIP = (f"openfuyao.com/kae.{e}" for e in ("hpre", "sec", "zip"))
VF_TREE_HPRE = [
    "0000:79:00.0", "0000:79:00.1", "0000:79:00.2",
    "0000:b9:00.0", "0000:b9:00.1", "0000:b9:00.2",
]  # fmt: skip


def preferred(
    node: Node, resource: str, available: list[str], must: list[str], size: int
) -> list[str]:
    answer = node.kubelet.preferred_allocation(resource, available, must, size)
    return list(answer.container_responses[0].deviceIDs)


def test_balanced_spreads_across_numa_nodes() -> None:
    """balanced (default): two devices land on both sockets; must_include is honoured."""
    with running_node("kunpeng920-2p-vfs") as node:
        assert node.wait_registered()
        chosen = preferred(node, HPRE, VF_TREE_HPRE, [], 2)
        assert {node.view(HPRE)[c][1] for c in chosen} == {(0,), (2,)}
        chosen = preferred(node, HPRE, VF_TREE_HPRE, ["0000:79:00.2"], 3)
        assert chosen[0] == "0000:79:00.2" and len(set(chosen)) == 3
        assert set(chosen) <= set(VF_TREE_HPRE)


def test_packed_fills_one_pf_first() -> None:
    """packed: three devices come from one PF and its VFs on one NUMA node."""
    with running_node("kunpeng920-2p-vfs", allocation_policy="packed") as node:
        assert node.wait_registered()
        chosen = preferred(node, HPRE, VF_TREE_HPRE, [], 3)
        assert len({c[:10] for c in chosen}) == 1, chosen
        assert preferred(node, HPRE, VF_TREE_HPRE[:2], [], 5) == VF_TREE_HPRE[:2]


def test_shares_advertise_n_ids_per_device_with_shared_health() -> None:
    """shares: 4 -> four IDs per device; isolating the device makes all four Unhealthy."""
    from kae_deviceplugin.testing.sysfs_builder import set_attribute

    engines = dict(Settings().engines)
    engines["sec"] = EngineSettings(shares=4)
    with running_node(engines=engines, scan_interval=0.1) as node:
        assert node.wait_registered()
        view = node.view(SEC)
        assert sorted(view) == [f"0000:{b}:00.0::{k}" for b in ("76", "b6") for k in range(4)]
        set_attribute(node.root, "hisi_sec2-0", "isolate", "1")
        assert node.wait_view(
            SEC,
            lambda v: (
                all(v[f"0000:76:00.0::{k}"][0] == "Unhealthy" for k in range(4))
                and all(v[f"0000:b6:00.0::{k}"][0] == "Healthy" for k in range(4))
            ),
        )
        assert set(node.view(HPRE)) == {"0000:79:00.0", "0000:b9:00.0"}


def test_functions_vf_only_and_disabled_engine() -> None:
    """functions: vf advertises only VFs; enabled: false does not serve the engine at all."""
    engines = dict(Settings().engines)
    engines["hpre"] = EngineSettings(functions="vf")
    engines["zip"] = EngineSettings(enabled=False)
    with running_node("kunpeng920-2p-vfs", engines=engines) as node:
        assert node.kubelet.wait_for(lambda k: len(k.registrations) >= 2, DEADLINE)
        assert node.wait_view(HPRE, lambda v: len(v) == 4)
        assert all(not i.endswith(".0") for i in node.view(HPRE))
        assert ZIP not in {r.resource for r in node.kubelet.registrations}


def test_uadk_numa_hint_and_openssl_engines_env() -> None:
    """Opt-in env: WD_<ALG>_CTX_NUM for the allocated NUMA node and OPENSSL_ENGINES."""
    env = EnvSettings(uadk_numa_hint=True, openssl_engines="/usr/local/lib/engines-1.1")
    with running_node(env=env) as node:
        assert node.wait_registered()
        envs = node.kubelet.allocate(HPRE, ["0000:b9:00.0"]).container_responses[0].envs
        assert envs["WD_RSA_CTX_NUM"] == "sync:1@2,async:1@2"
        assert envs["OPENSSL_ENGINES"] == "/usr/local/lib/engines-1.1"
        zip_envs = node.kubelet.allocate(ZIP, ["0000:75:00.0"]).container_responses[0].envs
        assert zip_envs["WD_COMP_CTX_NUM"] == "sync:1@0,async:1@0"
        assert "WD_RSA_CTX_NUM" not in zip_envs


def write_config(path: Path, text: str) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def test_config_reload_applies_valid_and_keeps_old_on_invalid() -> None:
    """A changed file is applied without re-registering unchanged resources; a bad one is
    logged and ignored; a disabled resource reports zero devices before its server stops."""
    with short_tmpdir() as workdir:
        TREES["kunpeng920-2p"].build(workdir / "node")
        config = workdir / "config.yaml"
        write_config(config, "version: v1\nscanInterval: 100ms\n")
        plugin_dir, node = workdir / "dp", workdir / "node"
        args = [
            sys.executable, "-m", "kae_deviceplugin", "serve", "--config", str(config),
            "--sysfs-root", str(node / "sys"), "--dev-root", str(node / "dev"),
            "--device-plugin-dir", str(plugin_dir), "--state-dir", str(workdir / "state"),
            "--metrics-address", "", "--nfd-features-file", "", "--registration", "kubelet-socket",
        ]  # fmt: skip
        with KubeletEmulator(plugin_dir) as kubelet:
            process = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
            try:
                assert kubelet.wait_for(lambda k: len(k.registrations) == 3, 20)
                write_config(
                    config, "version: v1\nscanInterval: 100ms\nengines:\n  sec: {shares: 2}\n"
                )
                assert kubelet.wait_for(lambda k: len(k.resources()[SEC]) == 4, DEADLINE)
                write_config(config, "version: v1\nscanInterval: nonsense\n")
                write_config(
                    config, "version: v1\nscanInterval: 100ms\nengines:\n  zip: {enabled: false}\n"
                )
                assert kubelet.wait_for(lambda k: k.resources()[ZIP] == [], DEADLINE)
                assert kubelet.wait_for(lambda k: len(k.resources()[SEC]) == 2, DEADLINE)
                assert len(kubelet.registrations) == 3  # nothing re-registered
                write_config(config, "version: v1\nscanInterval: [1\n")
                process.send_signal(signal.SIGHUP)
                answer = kubelet.allocate(HPRE, ["0000:79:00.0"])
                assert answer.container_responses[0].envs["KAE_HPRE_DEVICES"] == "hisi_hpre-2"
            finally:
                process.send_signal(signal.SIGTERM)
                _, stderr = process.communicate(timeout=10)
            assert process.returncode == 0, stderr
            assert "reload rejected" in stderr


def test_plugin_watcher_registration() -> None:
    """plugin-watcher mode: sockets in plugins_registry answer GetInfo as a DevicePlugin and
    serve the DevicePlugin API; NotifyRegistrationStatus marks the resource registered."""
    with running_node(registration="plugin-watcher") as node:
        registry = node.daemon.settings.kubelet_root / "plugins_registry"
        deadline = time.monotonic() + DEADLINE
        while not (registry / "kae-zip.sock").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert node.kubelet.registrations == []
        with grpc.insecure_channel(f"unix://{registry / 'kae-hpre.sock'}") as channel:
            info = reg_grpc.RegistrationStub(channel).GetInfo(reg_pb.InfoRequest(), timeout=5)
            assert info.type == "DevicePlugin" and info.name == HPRE
            assert info.supported_versions == ["v1beta1"]
            assert info.endpoint == str(registry / "kae-hpre.sock")
            reg_grpc.RegistrationStub(channel).NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(plugin_registered=True), timeout=5
            )
            options = pb_grpc.DevicePluginStub(channel).GetDevicePluginOptions(pb.Empty())
            assert options.get_preferred_allocation_available
        assert HPRE in node.daemon.registered


@pytest.mark.parametrize("shares", [1, 2])
def test_many_streams_and_calls_do_not_disturb_each_other(shares: int) -> None:
    """Allocate and GetPreferredAllocation from many threads at once are all answered right."""
    from concurrent.futures import ThreadPoolExecutor

    engines = {
        name: dataclasses.replace(e, shares=shares) for name, e in Settings().engines.items()
    }
    with running_node("kunpeng920-2p-vfs", engines=engines) as node:
        assert node.wait_registered()
        ids = sorted(node.view(SEC))

        def call(i: int) -> bool:
            device = ids[i % len(ids)]
            answer = node.kubelet.allocate(SEC, [device]).container_responses[0]
            pick = preferred(node, SEC, ids, [device], 2)
            return (
                answer.envs["KAE_SEC_PCI_ADDRESSES"] == device.split("::")[0] and pick[0] == device
            )

        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(call, range(200)))
