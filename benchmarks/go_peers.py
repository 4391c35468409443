"""The Go peers of issue 41: build them, and write the device list they serve for a tree.

``benchmarks/go_peers/`` holds two minimal Go programs, references rather than products: a DRA
driver on the upstream helper (``k8s.io/dynamic-resource-allocation``'s ``kubeletplugin`` and its
slice controller) and a device plugin on grpc-go and the kubelet's v1beta1 API. Both serve the
devices this file lists for a tree, which it takes from our own discovery and slice builder, so
that the two drivers of a comparison publish exactly the same devices with exactly the same
attributes and the figures compare the drivers, not two discoveries.

    python benchmarks/go_peers.py build            # prints the two binaries' paths
    python benchmarks/go_peers.py devices TREE OUT  # the device list of a sysfs tree
    python benchmarks/go_peers.py smoke            # the Go device plugin against the emulator
    sudo python benchmarks/go_peers.py cluster [SAMPLES]  # ours against them, real cluster

``smoke`` proves the Go device plugin registers every resource with the kubelet emulator over
real sockets and reports an isolated device Unhealthy. The Go DRA driver needs a real API
server over TLS (client-go sends no bearer token over plain HTTP, so the tests' HTTP API
server cannot stand in): it is proven on the e2e cluster.

The build is cached by the hash of the peers' sources and the Go version
(``$KAE_GO_PEERS_CACHE``, default ``~/.cache/kae-go-peers``); modules come from the Go module
proxy (``GOFLAGS=-mod=mod``), as the scheduler benchmark's do.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))  # the cluster runner's modules, for ``cluster``

from kae_deviceplugin.discovery.queues import QueueTotals  # noqa: E402
from kae_deviceplugin.discovery.scan import scan  # noqa: E402
from kae_deviceplugin.dra.slice_devices import DeviceOptions, device_name  # noqa: E402
from kae_deviceplugin.dra.slices import NodeRef, build_slices  # noqa: E402

SOURCES = Path(__file__).resolve().parent / "go_peers"
PROGRAMS = {"dra": "kae-go-dra", "deviceplugin": "kae-go-deviceplugin"}


def _go() -> str:
    for candidate in ("go", "/usr/local/go/bin/go"):
        found = subprocess.run(["which", candidate], capture_output=True, text=True, check=False)
        if found.returncode == 0 or Path(candidate).is_file():
            return found.stdout.strip() or candidate
    raise SystemExit("go_peers.py: no Go toolchain (go on PATH or /usr/local/go/bin/go)")


def _key(go: str) -> str:
    digest = hashlib.sha256()
    digest.update(subprocess.run([go, "version"], capture_output=True, check=True).stdout)
    for path in sorted(SOURCES.rglob("*")):
        if path.is_file() and path.suffix in (".go", ".mod", ".sum"):
            digest.update(str(path.relative_to(SOURCES)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build() -> dict[str, Path]:
    """The two peers' binaries, built once per source hash."""
    go = _go()
    cache = Path(os.environ.get("KAE_GO_PEERS_CACHE", Path.home() / ".cache" / "kae-go-peers"))
    out = cache / _key(go)
    binaries = {name: out / program for name, program in PROGRAMS.items()}
    if all(b.is_file() for b in binaries.values()):
        return binaries
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    for name, binary in binaries.items():
        subprocess.run(
            [go, "build", "-o", str(binary), f"./{name}"], cwd=SOURCES, env=env, check=True
        )
    return binaries


def devices(sysfs: Path, dev: Path, node: str) -> dict[str, Any]:
    """What both peers serve for the tree at ``sysfs``: each device's slice entry as our DRA
    driver publishes it (no taints: each driver adds its own), its uacce name, engine, PCI
    address and NUMA node."""
    inventory = scan(sysfs, dev)
    queues = QueueTotals(sysfs).update(inventory)
    plan = build_slices(
        inventory, NodeRef(node, ""), generation=1, queues=queues, options=DeviceOptions()
    )
    by_name = {d["name"]: d for s in plan.slices for d in s["spec"]["devices"]}
    entries = []
    for device in inventory:
        entry = {k: v for k, v in by_name[device_name(device)].items() if k != "taints"}
        entries.append({
            "slice": entry, "uacce": device.name, "engine": device.engine,
            "pci": device.pci_address,
            "numa": -1 if device.numa_node is None else device.numa_node,
        })  # fmt: skip
    return {"devices": entries}


def smoke() -> int:
    """The Go device plugin on a copy of the 2-socket fixture, against the kubelet emulator."""
    import shutil
    import tempfile

    from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator

    binary = build()["deviceplugin"]
    with tempfile.TemporaryDirectory(prefix="kae-go", dir="/tmp") as scratch:
        work = Path(scratch)
        tree = work / "tree"
        shutil.copytree(REPO / "sysfs_fixtures" / "kunpeng920-2p", tree, symlinks=True)
        listing = work / "devices.json"
        listing.write_text(json.dumps(devices(tree / "sys", tree / "dev", "node")))
        plugins = work / "device-plugins"
        plugins.mkdir()
        with KubeletEmulator(plugins) as kubelet:
            peer = subprocess.Popen([
                str(binary), "--device-plugin-dir", str(plugins), "--devices", str(listing),
                "--sysfs-root", str(tree / "sys"), "--dev-root", str(tree / "dev"),
            ])  # fmt: skip
            try:
                served = kubelet.wait_for(
                    lambda k: sorted(len(v) for v in k.resources().values()) == [2, 2, 2], 30
                )
                (tree / "sys/class/uacce/hisi_hpre-2/isolate").write_text("1\n")
                hpre = "openfuyao.com/kae.hpre"
                unhealthy = kubelet.wait_for(
                    lambda k: any(d.health == "Unhealthy" for d in k.resources().get(hpre, [])),
                    10,
                )
            finally:
                peer.terminate()
                peer.wait(10)
    print(f"registered every resource: {served}; an isolated HPRE reported: {unhealthy}")
    return 0 if served and unhealthy else 1


def on_cluster(samples: int) -> int:
    """Pod start, ours against the Go peers, on the e2e cluster (``bench_go_peers``): the
    cluster of the environment's exports, else one started and stopped here."""
    import tempfile

    from bench_core import machine, render
    from bench_go_peers import pod_start
    from cluster import running_cluster
    from kube_watch import KubeApi

    info = machine()
    with running_cluster() as cluster, tempfile.TemporaryDirectory(prefix="kae-go-") as tmp:
        api = KubeApi.from_kubeconfig(cluster.kubeconfig)
        figures = pod_start(cluster, api, Path(tmp), samples)
    print(render(figures, info))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"]:
        for name, binary in build().items():
            print(f"{name}\t{binary}")
        return 0
    if argv[:1] == ["smoke"]:
        return smoke()
    if argv[:1] == ["cluster"] and len(argv) <= 2:
        return on_cluster(int(argv[1]) if len(argv) == 2 else 20)
    if len(argv) == 3 and argv[0] == "devices":
        tree = Path(argv[1])
        listing = devices(tree / "sys", tree / "dev", "node")
        Path(argv[2]).write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")
        return 0
    print(__doc__, file=sys.stderr)
    return 0 if argv[:1] in (["-h"], ["--help"]) else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
