"""`kae-deviceplugin demo`: the real daemon on a bundled node, seen through a kubelet emulator.

The shipped pod-resources emulator stands in for the kubelet's pod-resources API, reporting the
demo's allocations as held by three pods (``demo/demo-<engine>``), so that with ``--serve`` the
daemon's ``/allocations``, ``kae_device_allocated`` and ``list --allocations`` show them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import sys
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from kae_deviceplugin.cli.allocations import endpoint_url
from kae_deviceplugin.config.rules import parse_address
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.daemon.preflight import check_listen
from kae_deviceplugin.daemon.run import DevicePluginDaemon, build_daemon
from kae_deviceplugin.errors import EXIT_USAGE, StartupError
from kae_deviceplugin.observability import http
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.podresources_emulator import Assignment, PodResourcesEmulator
from kae_deviceplugin.testing.sysfs_trees import TREES

REGISTRATION_DEADLINE = 10.0
BIND_DEADLINE = 10.0
DEMO_NAMESPACE = "demo"


def demo_settings(workdir: Path) -> Settings:
    """Everything under ``workdir``: the node tree, the kubelet's directories, the state dir."""
    return dataclasses.replace(
        Settings(),
        sysfs_root=workdir / "node" / "sys",
        dev_root=workdir / "node" / "dev",
        kubelet_root=workdir / "kubelet",
        device_plugin_dir=workdir / "kubelet" / "device-plugins",
        pod_resources_socket=workdir / "kubelet" / "pod-resources" / "kubelet.sock",
        state_dir=workdir / "state",
        metrics_address="",
        nfd_features_file=None,
        registration="kubelet-socket",
    )


def describe(
    kubelet: KubeletEmulator, say: Callable[[str], None], workdir: Path
) -> list[Assignment] | None:
    """Print what the kubelet sees, allocate one healthy device per engine; None on a failure.

    The allocations come back as the pods that hold them (one pod per engine), for the
    pod-resources emulator to report.

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
    holders: list[Assignment] = []
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
        pod = f"demo-{engine.name}"
        holders.append((DEMO_NAMESPACE, pod, "app", engine.resource, [devices[0].id]))
    return holders if ok else None


def address_problem(address: str) -> str | None:
    """Why ``address`` is no HOST:PORT to serve on, in serve's words; None when it is one.

    Port 0 (any free port) is allowed here: the demo prints the port it got.
    """
    if not address.strip():
        return "must be host:port or :port (empty serves nothing: leave --serve out)"
    try:
        parse_address(address.strip())
    except ValueError as err:
        return str(err)
    return None


def bound_url(address: str, port: int) -> str:
    """The URL of the endpoint bound from ``address``, with the port it really got."""
    host, _ = parse_address(address.strip())
    return endpoint_url(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")


def _tour(
    tree: str,
    *,
    kubelet: KubeletEmulator,
    pods: PodResourcesEmulator,
    endpoint: http.EndpointTask | None,
    say: Callable[[str], None],
    workdir: Path,
    outcome: list[bool],
) -> Callable[[DevicePluginDaemon], Coroutine[Any, Any, None]]:
    """The root task that shows the node, allocates, and then stops or keeps serving."""

    async def drive(daemon: DevicePluginDaemon) -> None:
        expected = len(daemon.inventory.resources)
        registered = await asyncio.to_thread(
            kubelet.wait_for,
            lambda k: sum(bool(v) for v in k.resources().values()) == expected,
            REGISTRATION_DEADLINE,
        )
        say(f"Node {tree!r}: {len(daemon.inventory)} KAE devices discovered.")
        holders = await asyncio.to_thread(describe, kubelet, say, workdir)
        pods.set_pods(holders or [])
        outcome.append(registered and holders is not None)
        if endpoint is None:
            daemon.request_stop()
            return
        if not await asyncio.to_thread(endpoint.bound.wait, BIND_DEADLINE):
            say(f"error: the endpoint did not listen within {BIND_DEADLINE:g}s")
            outcome[:] = [False]
            daemon.request_stop()
            return
        url = bound_url(daemon.settings.metrics_address, endpoint.port or 0)
        say(f"Listening on {url}: /metrics, /healthz, /readyz, /allocations, until Ctrl-C.")
        say(f"The pods demo/demo-<engine> hold one device each: try `kae-deviceplugin list "
            f"--allocations --endpoint {url}`; the kubelet emulator's sockets are in "
            f"{workdir}/kubelet.")  # fmt: skip
        await asyncio.Future()  # serve until Ctrl-C

    return drive


def _refusal(serve_on: str | None) -> int | None:
    """Refuse a --serve address as serve refuses a metrics address: exit 2, or 3 when busy."""
    if serve_on is None:
        return None
    problem = address_problem(serve_on)
    if problem is not None:
        sys.stderr.write(f"error: --serve {problem}\n")
        return EXIT_USAGE
    try:
        check_listen(serve_on.strip(), "--serve")
    except StartupError as err:
        sys.stderr.write(f"error: {err}\n")
        return err.exit_code
    return None


def _dra_demo(tree: str, say: Callable[[str], None], serve_on: str | None) -> int:
    """The DRA tour (``demo_dra``), which has no daemon to keep serving."""
    if serve_on is not None:
        sys.stderr.write(
            "error: --serve keeps the device plugin's daemon serving; "
            "--mode dra has no daemon to keep: leave one of them out\n"
        )
        return EXIT_USAGE
    # Imported here: the device-plugin demo loads none of DRA's modules.
    from kae_deviceplugin.cli.demo_dra import run_dra_demo  # noqa: PLC0415

    return run_dra_demo(tree, say)


def run_demo(
    tree: str, say: Callable[[str], None], serve_on: str | None = None, mode: str = "device-plugin"
) -> int:
    """The demo; with ``serve_on`` (an address for /metrics) it keeps serving until SIGINT.
    ``mode`` dra tours the DRA driver instead (``demo_dra``), which has nothing to serve."""
    if tree not in TREES:
        sys.stderr.write(
            f"error: unknown tree {tree!r}; choose one of: {', '.join(sorted(TREES))}\n"
        )
        return EXIT_USAGE
    if mode.lower() == "dra":
        return _dra_demo(tree, say, serve_on)
    refused = _refusal(serve_on)
    if refused is not None:
        return refused
    workdir = Path(tempfile.mkdtemp(prefix="kae-demo-", dir="/tmp"))
    try:
        TREES[tree].build(workdir / "node")
        settings = demo_settings(workdir)
        if serve_on is not None:
            settings = dataclasses.replace(settings, metrics_address=serve_on.strip())
        socket = settings.effective_pod_resources_socket
        socket.parent.mkdir(parents=True)
        with (
            KubeletEmulator(settings.effective_device_plugin_dir) as kubelet,
            PodResourcesEmulator(socket) as pods,
        ):
            # The daemon's own endpoint task, kept here to learn the port it bound (:0 too).
            endpoint = http.EndpointTask() if serve_on is not None else None
            outcome: list[bool] = []
            tour = _tour(
                tree, kubelet=kubelet, pods=pods, endpoint=endpoint, say=say, workdir=workdir,
                outcome=outcome,
            )  # fmt: skip
            daemon = build_daemon(settings, extra_tasks=[tour], endpoint=endpoint)
            code = asyncio.run(daemon.run())
        say(
            "<demo dir> is a temporary directory holding the node's sysfs and the plugin's state; "
            "it is removed now. On a node these are /sys and --state-dir."
        )
        return code if outcome == [True] else 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
