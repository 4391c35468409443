"""`kae-deviceplugin demo --mode dra`, run as an operator runs it (a subprocess from the
checkout): the pool, an allocation that keeps the claim's NUMA constraint, the driver's CDI spec
as a runtime would read it, and the container's devices, view and variables; its refusals; and
its claim and DeviceClasses the same as the README's and the chart's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

from kae_deviceplugin.cli.demo_dra import CLAIM, CLAIM_DEVICES, DEVICE_CLASSES
from tests.deploy.test_readme_dra import example_objects

REPO = Path(__file__).resolve().parents[2]


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m kae_deviceplugin demo --mode dra`` from the checkout, as the README runs it."""
    return subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", "demo", "--mode", "dra", *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip


def section(out: str, start: str, end: str) -> str:
    """The lines of ``out`` after the one starting with ``start``, up to the one with ``end``."""
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    last = next(i for i, line in enumerate(lines) if i > first and line.startswith(end))
    return "\n".join(lines[first + 1 : last])


def test_the_dra_tour_on_the_bundled_node() -> None:
    """Exit 0, nothing on stderr, no path outside <demo dir>; the pool's six devices; rsa and
    cipher allocated on one NUMA node; the spec is a CDI spec naming the claim's UID; the
    container gets exactly the two device nodes, their KAE_* variables and a /sys/class/uacce
    in which only those two resolve; the temporary directory is gone."""
    before = set(Path("/tmp").glob("kae-demo-dra-*"))
    done = demo()
    assert done.returncode == 0 and done.stderr == "", done.stderr
    out = done.stdout
    assert "Traceback" not in out and "/tmp/kae-demo-dra-" not in out
    pool = section(out, "ResourceSlice ", "  One device as the API server stores it")
    assert len(re.findall(r"^  (hpre|sec|zip)-0000-", pool, re.M)) == 6, pool
    allocated = re.findall(r"^  (rsa|cipher) +(\S+) +\(pool demo-node, NUMA (\d+)\)", out, re.M)
    assert [request for request, _, _ in allocated] == ["rsa", "cipher"], out
    (_, hpre, hpre_numa), (_, sec, sec_numa) = allocated
    assert hpre.startswith("hpre-") and sec.startswith("sec-") and hpre_numa == sec_numa
    spec = json.loads(textwrap.dedent(section(out, "The claim's CDI spec", "What the container")))
    assert spec["kind"] == "openfuyao.com/kae"
    assert all(d["name"].startswith(CLAIM.uid) for d in spec["devices"])
    gets = section(out, "What the container gets", "<demo dir> is a temporary")
    assert re.findall(r"device (/dev/\S+)", gets) == ["/dev/hisi_hpre-2", "/dev/hisi_sec2-0"]
    assert "env    KAE_HPRE_DEVICES=hisi_hpre-2" in gets
    assert "env    KAE_SEC_DEVICES=hisi_sec2-0" in gets
    assert "-> /sys/class/uacce (ro,rbind)" in gets
    assert "only hisi_hpre-2, hisi_sec2-0 resolve" in gets
    assert set(Path("/tmp").glob("kae-demo-dra-*")) <= before  # removed at the end


def test_a_node_whose_engines_are_all_tainted_leaves_the_claim_pending() -> None:
    """The faults tree: every HPRE is Unhealthy, published with a NoSchedule taint; the
    scheduler places nothing there, so the demo says the pod would stay Pending (exit 1)."""
    done = demo("--tree", "faults")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "unhealthy=engine-stopped:NoSchedule" in done.stdout
    assert "cannot be allocated on 'faults'" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_serve_has_nothing_to_serve_in_dra_mode() -> None:
    """--serve with --mode dra: one line on stderr, exit 2, as for any bad invocation."""
    done = demo("--serve", "127.0.0.1:0")
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert "--serve" in line and "--mode dra" in line


def test_the_claim_is_the_readmes_and_the_classes_the_charts() -> None:
    """The demo allocates the README's ResourceClaimTemplate rsa-and-cipher with the selectors
    of deploy/dra/deviceclasses.yaml (rendered from the chart), not copies that could drift."""
    template = next(o for o in example_objects() if o["kind"] == "ResourceClaimTemplate")
    assert template["metadata"]["name"] == CLAIM.name
    assert template["spec"]["spec"]["devices"] == CLAIM_DEVICES
    shipped = yaml.safe_load_all((REPO / "deploy" / "dra" / "deviceclasses.yaml").read_text())

    def selectors(spec: dict[str, Any]) -> list[str]:
        return [" ".join(s["cel"]["expression"].split()) for s in spec["selectors"]]

    classes = {d["metadata"]["name"]: selectors(d["spec"]) for d in shipped if d}
    assert classes == {name: selectors(spec) for name, spec in DEVICE_CLASSES.items()}


def test_the_readme_shows_it_beside_the_first_command_which_stays_two() -> None:
    """ "Two commands" keeps its two commands (one `sh` block each) and names `demo --mode
    dra` below the first; the usage line lists --mode for demo."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("## Two commands")
    two = text[start : text.index("\n## ", start + 1)]
    assert two.count("```sh") == 2
    first_end = two.index("```", two.index("```sh") + 5)
    assert "kae-deviceplugin demo --mode dra" in two[first_end : two.index("**Test it**")]
    assert re.search(r"kae-deviceplugin demo .*\[--mode device-plugin\|dra\]", text)
