"""Why our slices cost the scheduler what they cost: ``python benchmarks/sched_alloc.py``.

Times the scheduler's per-node DRA work (``structured.Allocator.Allocate``, the code its
DynamicResources Filter runs for every node it tries) with the Go program in
``benchmarks/sched_alloc/`` (needs Go and the k8s.io/dynamic-resource-allocation v0.37.2 module,
from the module cache or the proxy): one node whose slice is our publisher's for the 2-socket
tree with 2 VFs per PF, the slice it published before issue 31 (with the uacce name, ``api``,
``driverVersion``, ``physfn`` and every queue total), or a variant with some attributes left
out, and the claims of
benchmarks/sched.py under the chart's DeviceClasses. No cluster, no noise from the API server:
microseconds per node and claim, as a ratio to the minimal slice. See benchmarks/README.md,
"Scheduling".
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_core import Figure, as_json, machine, progress, render  # noqa: E402
from sched_objects import TEMPLATES, before_slice, full_slice, minimal_slice  # noqa: E402

from kae_deviceplugin.dra.slices import NodeRef  # noqa: E402

GO_DIR = Path(__file__).resolve().parent / "sched_alloc"
Device = dict[str, Any]


def _variant(devices: list[Device], change: Callable[[Device], None]) -> list[Device]:
    changed = copy.deepcopy(devices)
    for device in changed:
        change(device)
    return changed


def _keep(device: Device, keep: Callable[[str, Any], bool]) -> None:
    device["attributes"] = {k: v for k, v in device["attributes"].items() if keep(k, v)}


def variants() -> dict[str, list[Device]]:
    """Our slice, the minimal one, ours before issue 31, and ours less the algorithms."""
    node = NodeRef("n1", "00000000-0000-0000-0000-000000000000")
    full = full_slice(node, 1)["spec"]["devices"]
    return {
        "ours": full,
        "minimal": minimal_slice(node, 1)["spec"]["devices"],
        "ours before issue 31": before_slice(node, 1)["spec"]["devices"],
        "ours with only the true alg_*": _variant(
            full, lambda d: _keep(d, lambda k, v: not k.startswith("alg_") or v["bool"])
        ),
        "ours without alg_*": _variant(full, lambda d: _keep(d, lambda k, v: "alg_" not in k)),
    }


def claims() -> dict[str, Any]:
    """The benchmark's claim templates, with the defaults the API server would fill in."""
    specs = copy.deepcopy({name: {"devices": devices} for name, devices in TEMPLATES.items()})
    for spec in specs.values():
        for request in spec["devices"]["requests"]:
            request["exactly"].setdefault("allocationMode", "ExactCount")
            request["exactly"].setdefault("count", 1)
    return specs


def pairs(names: list[str]) -> list[tuple[str, str]]:
    """Every variant with the NUMA pair and with the by-engine claim; with the by-algorithm
    claim where the variant has ``alg_rsa``."""
    found = []
    for name in names:
        found += [(name, "numa-pair"), (name, "by-engine")]
        if name not in ("minimal", "ours without alg_*"):
            found.append((name, "by-alg"))
    return found


def run_go(document: dict[str, Any]) -> dict[tuple[str, str], float]:
    """Microseconds per Allocate by (variant, claim), from the Go program."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as data:
        json.dump(document, data)
        data.flush()
        env = {**os.environ, "GOFLAGS": "-mod=mod"}
        command = ["go", "run", ".", data.name]
        done = subprocess.run(
            command, cwd=GO_DIR, env=env, capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        raise RuntimeError(f"go run failed:\n{done.stderr[-2000:]}")
    found = {}
    for line in done.stdout.splitlines():
        claim, rest = line.split(" ", 1)
        variant, micros = rest.rsplit(" ", 1)
        found[(variant, claim)] = float(micros)
    return found


LABELS = {"by-alg": "(c) an HPRE by alg_rsa", "by-engine": "(c') an HPRE by engine",
          "numa-pair": "(d) HPRE + SEC, matchAttribute numaNode"}  # fmt: skip


def figures(times: dict[tuple[str, str], float], sizes: dict[str, int]) -> list[Figure]:
    rows = []
    for variant, claim in sorted(times, key=lambda p: (p[1], p[0] != "minimal", p[0])):
        base = times.get(("minimal", "by-engine" if claim == "by-alg" else claim))
        value = times[(variant, claim)]
        rows.append(
            Figure(f"alloc_{claim}_{variant}", f"{LABELS[claim]}: {variant}", "us/node", value,
                   ratio=None if base is None or variant == "minimal" else value / base,
                   reference="" if base is None else f"minimal slice {base:.1f} us",
                   note=f"{sizes[variant]} attributes and capacities per node")
        )  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the scheduler's per-node cost of our slices")
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results as JSON")
    args = parser.parse_args(argv)
    import yaml
    from sched_objects import DEVICE_CLASSES

    found = variants()
    classes = [d for d in yaml.safe_load_all(DEVICE_CLASSES.read_text()) if d]
    document = {"variants": found, "classes": classes, "claims": claims(),
                "pairs": pairs(list(found))}  # fmt: skip
    sizes = {
        name: sum(len(d["attributes"]) + len(d.get("capacity", {})) for d in devices)
        for name, devices in found.items()
    }
    info = machine()
    progress("timing Allocate per node and claim (about 20 s) ...")
    rows = figures(run_go(document), sizes)
    print(render(rows, info, args.format))
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(rows, info), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
