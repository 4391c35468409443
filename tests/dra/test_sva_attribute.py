"""The ``sva`` device attribute (issue 37): what each device runs with, for claims to pick by."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra.slices import NodeRef, build_slices
from kae_deviceplugin.testing.dra_scheduler import allocate
from kae_deviceplugin.testing.sysfs_builder import set_attribute
from tests.dra.inventories import fixture_inventory, tree_inventory
from tests.support.dra_process import device_names, dra_node, dra_process
from tests.support.fact_trees import FACT_TREES
from tests.support.http_apiserver import HttpApiServer

DRIVER = "kae.openfuyao.com"
NODE = NodeRef("worker-1", "6f1c2d1e-0000-4000-8000-000000000001")
CLASSES = {
    f"{e}.{DRIVER}": {"selectors": [{"cel": {"expression": (
        f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].engine == "{e}"')}}]}
    for e in ("hpre", "sec", "zip")
}  # fmt: skip
DEADLINE = 10.0


def slices_of(inventory: Inventory) -> list[dict[str, Any]]:
    plan = build_slices(inventory, NODE, generation=1, queues={})
    return list(plan.slices)


def sva_of(slices: list[dict[str, Any]]) -> dict[str, object]:
    return {d["name"]: d["attributes"]["sva"] for s in slices for d in s["spec"]["devices"]}


def sec_claim(expression: str) -> dict[str, Any]:
    """One SEC device whose selector is ``expression``."""
    request = {
        "deviceClassName": f"sec.{DRIVER}",
        "selectors": [{"cel": {"expression": expression}}],
    }
    return {"requests": [{"name": "cipher", "exactly": request}], "constraints": []}


WITH_SVA = f'device.attributes["{DRIVER}"].sva'
WITHOUT_SVA = f'device.attributes["{DRIVER}"].sva == false'


def test_every_device_says_whether_it_runs_with_sva(tmp_path: Path) -> None:
    """KAE 2.0 (flags 129): true; the SMMU-off node (flags 2, _noiommu): false; a device whose
    flags cannot be read: false, so a claim asking for SVA never gets it and the key is never
    missing."""
    kae2 = sva_of(slices_of(fixture_inventory("kunpeng920-2p")))
    assert len(kae2) == 6 and all(v == {"bool": True} for v in kae2.values())
    FACT_TREES["no-sva-low-cma"](tmp_path / "nosva")
    no_sva = sva_of(slices_of(tree_inventory(tmp_path / "nosva")))
    assert len(no_sva) == 3 and all(v == {"bool": False} for v in no_sva.values())
    FACT_TREES["mixed-provenance"](tmp_path / "odd")
    set_attribute(tmp_path / "odd", "hisi_sec2-0", "flags", "garbage")
    odd = sva_of(slices_of(tree_inventory(tmp_path / "odd")))
    assert odd["sec-0000-76-00-0"] == {"bool": False} and odd["sec-0000-b6-00-0"] == {"bool": True}


def test_a_claim_selects_devices_by_sva(tmp_path: Path) -> None:
    """The scheduler's allocator: a claim asking for SVA gets a SEC on the KAE 2.0 node and
    none on the SMMU-off node, where asking for ``sva == false`` gets one."""
    with_sva = slices_of(fixture_inventory("kunpeng920-2p"))
    assert allocate(sec_claim(WITH_SVA), with_sva, CLASSES)
    assert allocate(sec_claim(WITHOUT_SVA), with_sva, CLASSES) is None
    FACT_TREES["no-sva-low-cma"](tmp_path)
    without = slices_of(tree_inventory(tmp_path))
    assert allocate(sec_claim(WITH_SVA), without, CLASSES) is None
    (result,) = allocate(sec_claim(WITHOUT_SVA), without, CLASSES) or []
    assert result["device"] == "sec-0000-76-00-0"


def test_the_dra_daemon_publishes_sva_false_on_a_node_without_sva() -> None:
    """The real DRA daemon (serve --mode dra) against the test API server, on the SMMU-off
    node: its published slices say sva false on every device, and an SVA claim fits none."""
    with HttpApiServer() as api, dra_node(devices=[]) as node:
        FACT_TREES["no-sva-low-cma"](node.root)
        api.seed_node("worker-1")
        with dra_process(node, api) as daemon:
            daemon.register()
            expected = {"hpre-0000-79-00-0", "sec-0000-76-00-0", "zip-0000-75-00-0"}
            assert api.wait_for(lambda: device_names(api.slices()) == expected, DEADLINE), (
                daemon.describe()
            )
            slices = api.slices()
            assert all(v == {"bool": False} for v in sva_of(slices).values())
            assert allocate(sec_claim(WITH_SVA), slices, CLASSES) is None
            assert daemon.terminate() == 0, daemon.describe()
