"""`kae-deviceplugin demo`: the real daemon on a bundled node, seen through a kubelet emulator."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.daemon.run import DevicePluginDaemon, build_daemon
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_trees import TREES

REGISTRATION_DEADLINE = 10.0


def demo_settings(workdir: Path) -> Settings:
    """Everything under ``workdir``: the node tree, the kubelet's directories, the state dir."""
    return dataclasses.replace(
        Settings(),
        sysfs_root=workdir / "node" / "sys",
        dev_root=workdir / "node" / "dev",
        kubelet_root=workdir / "kubelet",
        device_plugin_dir=workdir / "kubelet" / "device-plugins",
        state_dir=workdir / "state",
        metrics_address="",
        nfd_features_file=None,
        registration="kubelet-socket",
    )


def describe(kubelet: KubeletEmulator, say: Callable[[str], None], workdir: Path) -> bool:
    """Print what the kubelet sees, allocate one healthy device per engine; False on a failure.

    Host paths under the demo's temporary ``workdir`` are shown as ``<demo dir>``: the directory
    is removed when the demo exits, so a printed absolute path would lead nowhere.
    """
    resources = kubelet.resources()
    say(f"The kubelet sees {len(resources)} resources registered:")
    say(
        "  (capacity: every device the plugin lists; allocatable: the Healthy ones, which pods get)"
    )
    for resource, devices in sorted(resources.items()):
        healthy = sum(d.healthy for d in devices)
        say(f"  {resource}: capacity {len(devices)}, allocatable {healthy}")
        for d in devices:
            numa = ",".join(map(str, d.numa_nodes)) or "-"
            say(f"    {d.id}  {d.health:<9}  NUMA {numa}")
    ok = True
    for engine in ENGINES:
        devices = [d for d in resources.get(engine.resource, []) if d.healthy]
        if not devices:
            continue
        answer = kubelet.allocate(engine.resource, [devices[0].id]).container_responses[0]
        say(f"Allocate {engine.resource} [{devices[0].id}] gives the container:")
        for spec in answer.devices:
            say(f"    device {spec.container_path} ({spec.permissions})")
        for key, value in sorted(answer.envs.items()):
            say(f"    env    {key}={value}")
        for mount in answer.mounts:
            host = mount.host_path.replace(str(workdir), "<demo dir>")
            say(f"    mount  {host} -> {mount.container_path} (read-only)")
        ok = ok and len(answer.devices) == 1
    return ok


def endpoint(address: str) -> str:
    """host:port to reach ``address`` from this host."""
    host, _, port = address.rpartition(":")
    return f"{host or '127.0.0.1'}:{port}"


def run_demo(tree: str, say: Callable[[str], None], serve_on: str | None = None) -> int:
    """The demo; with ``serve_on`` (an address for /metrics) it keeps serving until SIGINT."""
    if tree not in TREES:
        sys.stderr.write(
            f"error: unknown tree {tree!r}; choose one of: {', '.join(sorted(TREES))}\n"
        )
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="kae-demo-", dir="/tmp"))
    try:
        TREES[tree].build(workdir / "node")
        settings = demo_settings(workdir)
        if serve_on is not None:
            settings = dataclasses.replace(settings, metrics_address=serve_on)
        with KubeletEmulator(settings.effective_device_plugin_dir) as kubelet:
            outcome: list[bool] = []

            async def drive(daemon: DevicePluginDaemon) -> None:
                expected = len(daemon.inventory.resources)
                registered = await asyncio.to_thread(
                    kubelet.wait_for,
                    lambda k: sum(bool(v) for v in k.resources().values()) == expected,
                    REGISTRATION_DEADLINE,
                )
                say(f"Node {tree!r}: {len(daemon.inventory)} KAE devices discovered.")
                described = await asyncio.to_thread(describe, kubelet, say, workdir)
                outcome.append(registered and described)
                if serve_on is None:
                    daemon.request_stop()
                    return
                say(
                    f"Serving on until Ctrl-C: http://{endpoint(serve_on)}/metrics, /readyz, "
                    f"/allocations; the kubelet emulator's sockets are in {workdir}/kubelet."
                )
                await asyncio.Future()  # serve until Ctrl-C

            code = asyncio.run(build_daemon(settings, extra_tasks=[drive]).run())
        say(
            "<demo dir> is a temporary directory holding the node's sysfs and the plugin's state; "
            "it is removed now. On a node these are /sys and --state-dir."
        )
        return code if outcome == [True] else 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
