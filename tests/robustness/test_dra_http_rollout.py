"""The real DRA daemon against the HTTP test API server, for what issue 27 asks beyond single
faults: one publisher per node when two instances run (a rolling update's surge) and the
handover when the first stops; one write for a change confined to one slice of a two-slice
pool; readiness that names a watch that is down; and a frozen API server that the daemon rides
out, writing a taint once it answers again."""

from __future__ import annotations

from typing import Any

from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.testing.sysfs_trees import large_tree
from tests.support.dra_process import NODE, DraNode, device_names, dra_node, dra_process
from tests.support.http_apiserver import HttpApiServer

DEADLINE = 10.0


def _pool_written(api: HttpApiServer, count: int = 6) -> bool:
    return len(device_names(api.slices())) == count


def test_one_instance_publishes_and_the_other_takes_over_at_its_stop(
    api: HttpApiServer, node: DraNode
) -> None:
    """Two daemons on one kubelet root: the second stands by (its log says so) and is ready,
    and every slice write comes from the first; the first stops (SIGTERM), the slices are then
    wiped, and the second, now the publisher, writes them back."""
    api.seed_node(NODE)
    with dra_process(node, api, pod_uid="pod-a") as first:
        first.register()
        assert api.wait_for(lambda: _pool_written(api), DEADLINE), first.describe()
        with dra_process(node, api, pod_uid="pod-b") as second:
            second.register()
            assert second.wait_log("standing by"), second.describe()
            assert second.wait_ready(), second.readyz()
            writes = api.faults.count(("create", "update", "delete"))
            assert first.terminate() == 0
            assert second.wait_log("took over publishing"), second.describe()
            api.store.wipe()
            assert api.wait_for(lambda: _pool_written(api), DEADLINE), second.describe()
            assert api.faults.count(("create", "update", "delete")) == writes + 1


def _device(slice_: dict[str, Any], name: str) -> dict[str, Any]:
    return next(d for d in slice_["spec"]["devices"] if d["name"] == name)


def test_a_change_in_one_slice_of_two_is_one_update(api: HttpApiServer) -> None:
    """70 devices in two slices; the /dev node of one VF in the second slice goes: one update
    of that slice, at the same pool generation, and nothing else written."""
    api.seed_node(NODE)
    with dra_node(devices=large_tree(70)) as tree, dra_process(tree, api) as daemon:
        daemon.register()
        assert api.wait_for(lambda: _pool_written(api, 70), DEADLINE), daemon.describe()
        last = sorted(api.slices(), key=lambda s: s["metadata"]["name"])[-1]
        device = last["spec"]["devices"][-1]
        generation = last["spec"]["pool"]["generation"]
        before = api.faults.count(("create", "update", "delete"))
        address = device["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
        found = scan(tree.root / "sys", tree.root / "dev")
        uacce = next(d.name for d in found if d.pci_address == address)
        (tree.root / "dev" / uacce).unlink()

        def tainted() -> bool:
            found = [s for s in api.slices() if s["metadata"]["name"] == last["metadata"]["name"]]
            return bool(found) and bool(_device(found[0], device["name"]).get("taints"))

        assert api.wait_for(tainted, DEADLINE), daemon.describe()
        assert api.faults.count(("create", "update", "delete")) == before + 1
        assert {s["spec"]["pool"]["generation"] for s in api.slices()} == {generation}


def test_readyz_names_the_watch_while_the_api_server_is_away(
    api: HttpApiServer, node: DraNode
) -> None:
    """The API server goes away after the pool is published: the daemon keeps running,
    /readyz answers 503 naming the ResourceSlice watch; when it is back, ready again."""
    api.seed_node(NODE)
    with dra_process(node, api) as daemon:
        daemon.register()
        assert api.wait_for(lambda: _pool_written(api), DEADLINE)
        assert daemon.wait_ready(), daemon.readyz()
        api.away()
        assert daemon.wait_for(lambda: "watch of ResourceSlices" in daemon.readyz()[1], DEADLINE), (
            daemon.readyz()
        )
        assert daemon.readyz()[0] == 503 and daemon.alive
        api.back()
        assert daemon.wait_ready(), daemon.readyz()


def test_a_frozen_api_server_is_ridden_out_and_the_taint_written_after(
    api: HttpApiServer, node: DraNode
) -> None:
    """The API server stops answering (frozen) while a device loses its /dev node: the daemon
    stays up, and once the server answers again the device's taint is in the slice."""
    api.seed_node(NODE)
    with dra_process(node, api) as daemon:
        daemon.register()
        assert api.wait_for(lambda: _pool_written(api), DEADLINE)
        api.freeze(3.0)  # answers nothing for 3 s, then what it held
        (node.root / "dev" / "hisi_zip-4").unlink()

        def tainted() -> bool:
            return any(
                d.get("taints") for s in api.slices() for d in s["spec"]["devices"]
                if d["name"] == "zip-0000-75-00-0"
            )  # fmt: skip

        assert api.wait_for(tainted, DEADLINE), daemon.describe()
        assert daemon.alive
