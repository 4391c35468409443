"""The README's DRA path works as written: its Pod and ResourceClaimTemplate are complete, valid
objects of Kubernetes' newest schema, they name the DeviceClasses deploy/ ships, the pod uses
the claim its template makes, and the claim's selector holds for an HPRE as the driver publishes
it (and not for a device without RSA); its install and verify commands are the chart's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import celpy
import yaml
from celpy.adapter import json_to_cel

from kae_deviceplugin.discovery.queues import QueueTotals
from kae_deviceplugin.dra.slices import NodeRef, build_slices
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.deploy.test_deploy import REPO, latest_kubernetes
from tests.dra.inventories import tree_inventory

README = REPO / "README.md"


def dra_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Dynamic Resource Allocation")
    return text[start : text.index("\n## ", start + 1)]


def example_objects() -> list[dict[str, Any]]:
    """The objects of the DRA section's YAML block that holds a Pod."""
    blocks = re.findall(r"```yaml\n(.*?)```", dra_section(), re.S)
    block = next(b for b in blocks if "kind: Pod" in b)
    return [doc for doc in yaml.safe_load_all(block) if doc]


def test_the_example_is_a_pod_and_its_claim_template_valid_for_kubernetes(tmp_path: Path) -> None:
    """kubernetes-validate --strict (the newest schema, resource.k8s.io/v1) takes both objects
    (the image placeholder made concrete)."""
    objs = example_objects()
    assert sorted(o["kind"] for o in objs) == ["Pod", "ResourceClaimTemplate"]
    path = tmp_path / "example.yaml"
    path.write_text(yaml.safe_dump_all(objs).replace("<your image", "example.com/app:1 #"))
    out = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet",
         "-k", latest_kubernetes(), str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_pod_uses_the_claim_of_its_template_and_the_shipped_classes() -> None:
    """The pod's claim comes from the template, its container asks for that claim, and every
    request names a DeviceClass of deploy/dra/deviceclasses.yaml."""
    objs = {o["kind"]: o for o in example_objects()}
    template, pod = objs["ResourceClaimTemplate"], objs["Pod"]
    (claim,) = pod["spec"]["resourceClaims"]
    assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["claims"] == [{"name": claim["name"]}]
    shipped = yaml.safe_load_all((REPO / "deploy" / "dra" / "deviceclasses.yaml").read_text())
    classes = {d["metadata"]["name"] for d in shipped if d}
    requests = template["spec"]["spec"]["devices"]["requests"]
    assert {r["exactly"]["deviceClassName"] for r in requests} <= classes
    constraint = template["spec"]["spec"]["devices"]["constraints"][0]
    assert constraint["matchAttribute"] == "resource.kubernetes.io/numaNode"


def test_the_claims_selector_holds_for_a_published_hpre(tmp_path: Path) -> None:
    """The RSA selector, evaluated on the devices the driver publishes for a fixture node, picks
    every HPRE (all do RSA) and refuses a device whose alg_rsa is false; the NUMA constraint's
    attribute is published on each."""
    TREES["kunpeng920-2p"].build(tmp_path)
    inventory = tree_inventory(tmp_path)
    queues = QueueTotals(tmp_path / "sys").update(inventory)
    plan = build_slices(inventory, NodeRef("n1", "u"), generation=1, queues=queues)
    devices = [d for s in plan.slices for d in s["spec"]["devices"]]
    template = next(o for o in example_objects() if o["kind"] == "ResourceClaimTemplate")
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    env = celpy.Environment()
    program = env.program(env.compile(request["selectors"][0]["cel"]["expression"]))

    def selected(device: dict[str, Any]) -> bool:
        attributes: dict[str, dict[str, Any]] = {}
        for name, value in device["attributes"].items():
            domain, _, key = name.rpartition("/")
            attributes.setdefault(domain or "kae.openfuyao.com", {})[key] = next(
                iter(value.values())
            )
        cel_device = {"driver": "kae.openfuyao.com", "attributes": attributes}
        return bool(program.evaluate({"device": json_to_cel(cel_device)}))

    hpres = [d for d in devices if d["name"].startswith("hpre-")]
    assert hpres and all(selected(d) for d in hpres)
    assert all("resource.kubernetes.io/numaNode" in d["attributes"] for d in hpres)
    without_rsa = {**hpres[0], "attributes": {**hpres[0]["attributes"], "alg_rsa": {"bool": False}}}
    assert not selected(without_rsa)


def test_install_and_verify_are_the_charts_commands() -> None:
    """The section installs with --set dra.enabled=true and verifies with the driver's slices
    and the DeviceClasses."""
    section = dra_section()
    assert re.search(r"helm install [^\n]*\\\n[^\n]*--set dra\.enabled=true", section), section
    assert "kubectl get resourceslices --field-selector spec.driver=kae.openfuyao.com" in section
    assert "kubectl get deviceclasses" in section
