"""Records one matrix cell's e2e results and rewrites docs/compatibility.md's tables from all of
them (called by scripts/cluster/matrix; runs on the standard library alone).

    matrix_report.py --results docs/compatibility.json --doc docs/compatibility.md \
        --cell 1.34-containerd2 --k8s 1.34.4 --kubelet 1.34.4 --containerd 2.4.2 --cdi on \
        --commit abc123 --seconds 300 dp=/var/tmp/kae-e2e-matrix/1.34-containerd2.dp.xml ...

The JSON keeps, per cell, its stack, the date and commit of its last run and every test's
outcome (passed, failed, skipped with the reason). The document's text between the
``<!-- matrix:begin -->`` and ``<!-- matrix:end -->`` lines is replaced by two tables: the cells
with a result per subset, and the version-dependent features with, per cell, the test that
proved it, or why it is absent.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

BEGIN = "<!-- matrix:begin -->"
END = "<!-- matrix:end -->"

# Each version-dependent feature and the e2e test that shows it.
FEATURES: tuple[tuple[str, str], ...] = (
    (
        "device-plugin registration, capacity, health flips",
        "test_node_resources.py::test_capacity_and_allocatable_equal_the_fixture[kubelet-socket]",
    ),
    (
        "a pod gets its devices; the pod-resources API agrees",
        "test_pods.py::test_pod_gets_its_devices_and_env_and_frees_them",
    ),
    (
        "CDI names in Allocate (device plugin `--cdi on`)",
        "test_cdi.py::test_cdi_mode_gives_the_pod_its_devices_through_cdi_devices",
    ),
    (
        "CDI off: the device plugin's `--cdi on` names device nodes instead",
        "test_cdi.py::test_cdi_mode_over_a_runtime_with_cdi_off_names_the_device_nodes",
    ),
    (
        "health in the pod's status (device plugin)",
        "test_pod_health.py::test_an_isolated_device_is_unhealthy_in_its_pods_status_until_it_recovers",
    ),
    (
        "NFD labels from the feature file",
        "test_nfd.py::test_nfd_labels_the_node_from_the_plugins_feature_file",
    ),
    (
        "the chart (device plugin)",
        "test_helm.py::test_install_makes_the_plugin_pod_ready_and_gives_the_node_capacity",
    ),
    (
        "a DRA claim runs with its devices",
        "test_dra_mode.py::test_a_claim_by_capability_and_numa_gets_exactly_its_devices",
    ),
    (
        "slices stored as written (no field dropped)",
        "test_dra_slices.py::test_the_api_server_keeps_the_slices_exactly_and_they_come_back",
    ),
    (
        "health in the pod's status (DRA health service)",
        "test_dra_lifecycle.py::test_a_held_devices_health_reaches_its_pods_status",
    ),
    (
        "device taints",
        "test_dra_taints_sharing.py::test_an_unhealthy_device_is_tainted_kept_and_lifted",
    ),
    (
        "consumable capacity (shared ZIP queues)",
        "test_dra_taints_sharing.py::test_two_claims_share_one_zip_by_queues_and_a_third_waits",
    ),
    (
        "taints dropped by the server: unhealthy devices left out, no write loop",
        "test_dra_degrade.py::test_where_taints_are_dropped_an_unhealthy_device_leaves_the_pool_in_one_write",
    ),
    (
        "consumable capacity dropped by the server: a shared ZIP served whole",
        "test_dra_degrade.py::test_where_consumable_capacity_is_dropped_a_shared_zip_is_served_whole",
    ),
    (
        "the chart (DRA)",
        "test_helm_dra.py::test_install_publishes_the_pool_with_rbac_and_device_classes",
    ),
    (
        "extended resources served by DRA",
        "test_helm_dra.py::test_a_claim_and_a_plain_limit_are_both_served_by_dra",
    ),
    (
        "the chart's admission policy (DRA)",
        "test_helm_dra.py::test_the_driver_may_touch_only_its_own_nodes_slices",
    ),
    (
        "CDI off: empty pool, pod stays Pending",
        "test_cdi_off.py::test_an_empty_pool_says_why_and_a_claims_pod_stays_pending",
    ),
    (
        "CDI off: prepare refused",
        "test_cdi_off.py::test_a_claim_allocated_anyway_is_refused_at_prepare_and_its_pod_never_starts",
    ),
    (
        "CDI on: the same claim runs",
        "test_cdi_off.py::test_a_runtime_that_applies_cdi_gets_the_pool_and_the_claim_runs_with_its_device",
    ),
)


def parse_junit(path: Path) -> dict[str, dict[str, str]]:
    """``module.py::test`` -> {"outcome": passed|failed|skipped, "message": ...}."""
    if not path.exists():
        return {"(no results)": {"outcome": "failed", "message": f"{path} missing"}}
    found: dict[str, dict[str, str]] = {}
    for case in ET.parse(path).iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        name = f"{module}.py::{case.get('name', '')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                message = (
                    (child.get("message") or "").splitlines()[0][:300]
                    if child.get("message")
                    else ""
                )
                break
            if child.tag == "skipped":
                outcome, message = "skipped", (child.get("message") or "")[:400]
        found[name] = {"outcome": outcome, "message": message}
    return found


def subset_result(tests: dict[str, dict[str, str]]) -> str:
    counts = {
        k: sum(1 for t in tests.values() if t["outcome"] == k)
        for k in ("passed", "failed", "skipped")
    }
    text = f"{counts['passed']} passed, {counts['skipped']} skipped"
    if counts["failed"]:
        failed = ", ".join(
            sorted(n.split("::")[-1][:60] for n, t in tests.items() if t["outcome"] == "failed")
        )
        return f"**FAILED {counts['failed']}** ({failed}); {text}"
    return f"pass ({text})"


def feature_cell(cell: dict[str, Any], test: str, reasons: list[str]) -> str:
    """``proven``, ``**FAILED**``, ``absent [n]`` (n: the reason's number in `reasons`, which
    grows) or ``not run``."""
    for tests in cell["subsets"].values():
        for name, result in tests.items():
            if name == test or name.startswith(test + "["):
                if result["outcome"] == "passed":
                    return "proven"
                if result["outcome"] == "failed":
                    return "**FAILED**"
                reason = result["message"].removeprefix("Skipped: ")
                reason = reason.split(" (this cluster:")[0]
                if reason not in reasons:
                    reasons.append(reason)
                return f"absent [{reasons.index(reason) + 1}]"
    return "not run"


def render(results: dict[str, Any]) -> str:
    cells: dict[str, Any] = results["cells"]

    def key(cid: str) -> tuple[tuple[int, ...], ...]:
        c = cells[cid]
        return tuple(
            tuple(int(p) for p in c[k].split(".")) for k in ("k8s", "kubelet", "containerd")
        )

    order = sorted(cells, key=key, reverse=True)
    lines = [
        "| cell | control plane | kubelet | containerd (CDI) | device-plugin subset | DRA subset "
        "| date | commit | time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cid in order:
        c = cells[cid]
        subsets = c["subsets"]
        dp = subset_result(subsets["dp"]) if "dp" in subsets else "not in this cell"
        dra = subset_result(subsets["dra"]) if "dra" in subsets else "not in this cell"
        lines.append(
            f"| `{cid}` | {c['k8s']} | {c['kubelet']} | {c['containerd']} ({c['cdi']}) "
            f"| {dp} | {dra} | {c['date']} | {c['commit']} | {c['seconds']} s |"
        )
    lines += ["", "| feature | " + " | ".join(f"`{c}`" for c in order) + " |"]
    lines.append("|---|" + "---|" * len(order))
    reasons: list[str] = []
    for title, test in FEATURES:
        row = " | ".join(feature_cell(cells[c], test, reasons) for c in order)
        lines.append(f"| {title} | {row} |")
    lines.append("")
    lines += [f"{n}. {reason}" for n, reason in enumerate(reasons, 1)]
    failed = [
        f"- `{cid}` {subset}: `{name}`: {result['message']}"
        for cid in order
        for subset, tests in sorted(cells[cid]["subsets"].items())
        for name, result in sorted(tests.items())
        if result["outcome"] == "failed"
    ]
    if failed:
        lines += ["", "Failures (the first line of each):", "", *failed]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in (
        "--results",
        "--doc",
        "--cell",
        "--k8s",
        "--kubelet",
        "--containerd",
        "--cdi",
        "--commit",
    ):
        parser.add_argument(flag, required=True)
    parser.add_argument("--seconds", type=int, default=0)
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("junit", nargs="*", help="SUBSET=FILE")
    args = parser.parse_args(argv)
    path = Path(args.results)
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"cells": {}}
    subsets = {}
    for item in args.junit:
        subset, _, file = item.partition("=")
        subsets[subset] = parse_junit(Path(file))
    results["cells"][args.cell] = {
        "k8s": args.k8s, "kubelet": args.kubelet, "containerd": args.containerd, "cdi": args.cdi,
        "date": args.date, "commit": args.commit, "seconds": args.seconds, "subsets": subsets,
    }  # fmt: skip
    path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    doc = Path(args.doc)
    text = doc.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    doc.write_text(f"{head}{BEGIN}\n{render(results)}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
