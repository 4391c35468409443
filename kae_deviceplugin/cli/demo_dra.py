"""`kae-deviceplugin demo --mode dra`: the DRA driver's part of a claim's life, on a bundled node.

No cluster: three emulators shipped for tests stand in for it, each written from its API and
not from the driver: the API server's store holds the slices as the driver builds them (the
driver's own ``build_slices`` with the options ``serve --mode dra`` derives from its settings),
the scheduler allocates a claim from them (``testing.dra_scheduler``), and a CDI-applying
runtime starts the container (``testing.cdi_container``). What is the driver's own: the pool,
``ClaimPreparer`` (checkpoint and CDI spec written in the demo's temporary directory) and the
container view of ``/sys/class/uacce``.

The claim is the README's: an HPRE that does RSA and a SEC on the same NUMA node, through the
chart's DeviceClasses (a test holds both equal to the documents they come from).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.node_files import ContainerFiles
from kae_deviceplugin.container.serving import ServingPolicy
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.discovery.queues import QueueTotals
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.dra.api import DRIVER, plugin_dir
from kae_deviceplugin.dra.checkpoint import CheckpointFile
from kae_deviceplugin.dra.claim_specs import ClaimAnswer
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.dra.frontend import device_options
from kae_deviceplugin.dra.prepare import ClaimPreparer
from kae_deviceplugin.dra.slices import NodeRef, build_slices
from kae_deviceplugin.testing.cdi_container import Container, run_container, uacce_view
from kae_deviceplugin.testing.dra_scheduler import SelectorError, Unsupported, allocate
from kae_deviceplugin.testing.sysfs_trees import TREES

Say = Callable[[str], None]
NODE = NodeRef("demo-node", "0b5c6d7e-8f90-4a1b-9c2d-3e4f5a6b7c8d")
CLAIM = ClaimRef("demo", "rsa-and-cipher", "6f1c2b9e-0d4a-4b8e-9c3f-5a7d2e1b0c4d")
NUMA = "resource.kubernetes.io/numaNode"
# The chart's DeviceClasses (deploy/dra/deviceclasses.yaml), by name: their selectors.
DEVICE_CLASSES: dict[str, dict[str, Any]] = {
    f"{engine}.{DRIVER}": {
        "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}" && '
                               f'device.attributes["{DRIVER}"].engine == "{engine}"'}}]
    }
    for engine in ("hpre", "sec", "zip")
}  # fmt: skip
# The README's ResourceClaimTemplate rsa-and-cipher: its claim's spec.devices.
CLAIM_DEVICES: dict[str, Any] = {
    "requests": [
        {"name": "rsa", "exactly": {
            "deviceClassName": f"hpre.{DRIVER}",
            "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].alg_rsa'}}],
        }},
        {"name": "cipher", "exactly": {"deviceClassName": f"sec.{DRIVER}"}},
    ],
    "constraints": [{"matchAttribute": NUMA}],
}  # fmt: skip


def dra_demo_settings(workdir: Path) -> Settings:
    """serve --mode dra's settings with every path under ``workdir``."""
    return dataclasses.replace(
        Settings(),
        mode="dra",
        node_name=NODE.name,
        sysfs_root=workdir / "node" / "sys",
        dev_root=workdir / "node" / "dev",
        kubelet_root=workdir / "kubelet",
        state_dir=workdir / "state",
        cdi_dir=workdir / "cdi",
        metrics_address="",
        nfd_features_file=None,
    )


def publish(settings: Settings, inventory: Inventory) -> list[dict[str, Any]]:
    """The slices the driver writes for ``inventory``, as the API server then holds them."""
    queues = QueueTotals(settings.sysfs_root).update(inventory)
    plan = build_slices(
        inventory, NODE, generation=1, queues=queues, options=device_options(settings)
    )
    return [json.loads(json.dumps(s)) for s in plan.slices]  # stored: plain JSON, no sharing


def _attribute(entry: Mapping[str, Any], key: str) -> object:
    value = entry["attributes"].get(key, {})
    return next(iter(value.values()), "-")


def _taints(entry: Mapping[str, Any]) -> str:
    """The device's taints, ``key=value:effect`` with the driver's domain left out, or -."""
    taints = [
        f"{t['key'].removeprefix(DRIVER + '/')}={t.get('value', '')}:{t['effect']}"
        for t in entry.get("taints", [])
    ]
    return " ".join(taints) or "-"


def show_pool(slices: Sequence[Mapping[str, Any]], say: Say) -> None:
    """Each slice and its devices, then one device whole, as ``kubectl get -o yaml`` shows it."""
    say("The pool the driver publishes, as the API server stores it:")
    for body in slices:
        spec = spec_of(body)
        pool = spec["pool"]
        say(f"ResourceSlice {body['metadata']['name']}: driver {spec['driver']}, node "
            f"{spec['nodeName']}, pool {pool['name']} generation {pool['generation']} "
            f"({pool['resourceSliceCount']} slice), {len(spec['devices'])} devices:")  # fmt: skip
        say(f"  {'DEVICE':<19} {'ENGINE':<6} {'FUNC':<4} {'NUMA':<4} {'QUEUES':<6} "
            f"{'ALGORITHMS':<21} TAINTS")  # fmt: skip
        for entry in spec["devices"]:
            algorithms = [k[4:] for k, v in entry["attributes"].items() if v.get("bool") is True]
            queues = entry.get("capacity", {}).get("queues", {}).get("value", "-")
            say(f"  {entry['name']:<19} {_attribute(entry, 'engine'):<6} "
                f"{_attribute(entry, 'function'):<4} {_attribute(entry, NUMA)!s:<4} {queues:<6} "
                f"{', '.join(algorithms):<21} {_taints(entry)}")  # fmt: skip
    first = spec_of(slices[0])["devices"][:1]
    if first:
        say("  One device as the API server stores it (`kubectl get resourceslices -o yaml`):")
        for line in yaml.safe_dump(first[0], sort_keys=False).splitlines():
            say(f"    {line}")


def spec_of(body: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = body["spec"]
    return spec


def show_claim(results: Sequence[Mapping[str, str]], slices: Sequence[Any], say: Say) -> None:
    say(f"ResourceClaim {CLAIM} (the README's rsa-and-cipher): an HPRE that does RSA and a SEC "
        "on the same NUMA node:")  # fmt: skip
    for request in CLAIM_DEVICES["requests"]:
        exactly = request["exactly"]
        extra = "".join(
            f", selector {s['cel']['expression']}" for s in exactly.get("selectors", [])
        )
        say(f"  request {request['name']}: class {exactly['deviceClassName']}{extra}")
    say(f"  constraint: matchAttribute {NUMA}")
    numa = {e["name"]: _attribute(e, NUMA) for s in slices for e in spec_of(s)["devices"]}
    say("Allocated as the scheduler would (class and request selectors, no refusing taint, "
        "then the constraint):")  # fmt: skip
    for result in results:
        device = result["device"]
        say(f"  {result['request']:<7} {device}  (pool {result['pool']}, NUMA {numa[device]})")


def claim_object(results: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """The claim as the API server returns it once allocated: what prepare reads."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": CLAIM.namespace, "name": CLAIM.name, "uid": CLAIM.uid},
        "spec": {"devices": CLAIM_DEVICES},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }


async def prepare(settings: Settings, inventory: Inventory, claim: dict[str, Any]) -> ClaimAnswer:
    """NodePrepareResources for the claim, through the driver's own preparer."""
    container_files = ContainerFiles()
    policy = ServingPolicy.from_settings(settings)
    # The node-wide view the claims' specs mount, written as the DRA daemon's reconcile does.
    container_files.sync(settings, inventory, policy.container)

    async def get_claim(namespace: str, name: str) -> Mapping[str, Any]:
        return claim

    plugin_dir(settings.kubelet_root).mkdir(parents=True)
    settings.cdi_dir.mkdir()
    preparer = ClaimPreparer(
        pool=NODE.name,
        inventory=lambda: inventory,
        policy=lambda: ServingPolicy.from_settings(settings, container_files.problem),
        get_claim=get_claim,
        checkpoint=CheckpointFile(plugin_dir(settings.kubelet_root)),
        cdi_dir=settings.cdi_dir,
    )
    return (await preparer.prepare([CLAIM]))[CLAIM.uid]


def show_container(container: Container, say: Say, hide: Callable[[str], str]) -> None:
    say("What the container gets (a runtime applying those CDI devices):")
    for path, host in container.device_nodes.items():
        say(f"    device {path} (host {hide(host)})")
    for target, (host, options) in container.mounts.items():
        say(f"    mount  {hide(host)} -> {target} ({','.join(options)})")
    for name, value in sorted(container.env.items()):
        say(f"    env    {name}={value}")
    view = uacce_view(container)
    usable = [name for name, resolves in view.items() if resolves]
    say(f"  ls /sys/class/uacce in the container: {' '.join(sorted(view))}; of these only "
        f"{', '.join(usable)} resolve (their PCI functions are mounted): UADK uses those and "
        "skips the rest")  # fmt: skip


def tour(tree: str, workdir: Path, say: Say) -> int:
    """The DRA demo in ``workdir``; its exit code."""
    TREES[tree].build(workdir / "node")
    settings = dra_demo_settings(workdir)
    inventory = scan(settings.sysfs_root, settings.dev_root)
    say(f"Node {tree!r} in DRA mode: {len(inventory)} KAE devices discovered. No cluster: the "
        "API server's store, the scheduler and the container runtime are emulators; the pool, "
        "the prepare and the CDI spec are the driver's own.")  # fmt: skip
    slices = publish(settings, inventory)
    show_pool(slices, say)
    try:
        results = allocate(CLAIM_DEVICES, slices, DEVICE_CLASSES)
    except (SelectorError, Unsupported) as err:
        say(f"error: the scheduler cannot evaluate the claim: {err}")
        return 1
    if results is None:
        say(f"The claim cannot be allocated on {tree!r}: no HPRE with alg_rsa and SEC on one "
            "NUMA node without a refusing taint; its pod would stay Pending.")  # fmt: skip
        return 1
    show_claim(results, slices, say)
    answer = asyncio.run(prepare(settings, inventory, claim_object(results)))
    if answer.error:
        say(f"error: the driver refused to prepare the claim: {answer.error}")
        return 1
    return show_prepared(settings, answer, say, workdir)


def show_prepared(settings: Settings, answer: ClaimAnswer, say: Say, workdir: Path) -> int:
    """The checkpoint, the CDI spec, and the container the runtime makes of them."""

    def hide(text: str) -> str:
        return text.replace(str(workdir), "<demo dir>")

    checkpoint = CheckpointFile(plugin_dir(settings.kubelet_root)).path
    say(f"Prepared by the driver (NodePrepareResources): recorded in {hide(str(checkpoint))}; "
        "the kubelet passes the runtime the CDI devices:")  # fmt: skip
    names = [name for device in answer.devices for name in device.cdi_ids]
    for name in names:
        say(f"    {name}")
    [spec_path] = sorted(settings.cdi_dir.iterdir())
    say(f"The claim's CDI spec, {hide(str(spec_path))}:")
    for line in spec_path.read_text().splitlines():
        say(f"    {hide(line)}")
    show_container(run_container(settings.cdi_dir, names), say, hide)
    return 0


def run_dra_demo(tree: str, say: Say) -> int:
    """The tour in a temporary directory, removed at the end whatever happens."""
    workdir = Path(tempfile.mkdtemp(prefix="kae-demo-dra-", dir="/tmp"))
    try:
        code = tour(tree, workdir, say)
        say("<demo dir> is a temporary directory holding the node's sysfs, the kubelet's root, "
            "the CDI directory and the driver's state; it is removed now. On a node these are "
            "/sys, /var/lib/kubelet, /var/run/cdi and --state-dir.")  # fmt: skip
        return code
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
