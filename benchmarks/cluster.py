"""The real-cluster figures of issues 12 and 20 in one table: ``sudo python benchmarks/cluster.py``.

Pod start with and without a KAE device, the real kubelet's restart to allocatable restored in
both registration modes, DRA mode (pod start with a claim, daemon start to slices, a health
change to the slice), and (with Helm) ``helm install`` to capacity and the ``helm upgrade``
window. It uses the cluster named by ``scripts/cluster/up``'s exports when they are set, else it
starts one and stops it at the end. Needs root (device nodes, the kubelet's directories).
See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The cluster helpers are shared with the e2e tests; this script runs from benchmarks/.
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_cluster import kubelet_restart, pod_start, served_plugin  # noqa: E402
from bench_core import Figure, as_json, machine, progress, render, section  # noqa: E402
from kube_watch import KubeApi  # noqa: E402

from tests.e2e.cluster import CLUSTER_SCRIPTS, EXPORTS, Cluster, parse_exports  # noqa: E402

DEFAULT_SECTIONS = ("pods", "restart", "helm", "dra")
# Issue 41, ours against the Go peers: they build Go (about 13 min cold) and the burst needs a
# node that takes 50 more pods (KAE_E2E_MAX_PODS=70), so they run only when asked (--go).
GO_SECTIONS = ("go", "go-view", "go-burst", "go-events")
SECTIONS = DEFAULT_SECTIONS + GO_SECTIONS


@contextmanager
def running_cluster() -> Iterator[Cluster]:
    """The cluster of the environment's exports, else one started (and stopped) here."""
    if all(name in os.environ for name in EXPORTS):
        yield Cluster.from_env(dict(os.environ))
        return
    progress("starting the cluster (scripts/cluster/up) ...")
    proc = subprocess.run(
        [str(CLUSTER_SCRIPTS / "up")], stdout=subprocess.PIPE, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit("cluster.py: the cluster could not start (see up's last line above)")
    try:
        yield Cluster.from_env(parse_exports(proc.stdout))
    finally:
        subprocess.run([str(CLUSTER_SCRIPTS / "down")], check=False)


def helm_figures(cluster: Cluster, repeats: int) -> list[Figure]:
    """The chart's rows; imported here, as they need Helm and the plugin image only then."""
    import bench_helm

    return bench_helm.figures(cluster, repeats)


def dra_figures(cluster: Cluster, api: KubeApi, work: Path, samples: int) -> list[Figure]:
    """The DRA rows: pod start with a claim, daemon start to slices, health to slice."""
    import bench_dra

    return [
        bench_dra.pod_start(cluster, api, work / "pods", samples),
        bench_dra.slices_published(cluster, api, work / "start", min(samples, 5)),
        bench_dra.health_to_slice(cluster, api, work / "health", min(samples, 5)),
    ]


def go_sections(
    cluster: Cluster, api: KubeApi, work: Path, args: Any
) -> dict[str, Callable[[], list[Figure]]]:
    """The Go peer comparison's sections (issue 41), by name, each measuring when called."""
    return {
        "go": lambda: go_figures(cluster, api, work / "go", args.pods),
        "go-view": lambda: go_figures(cluster, api, work / "go-view", args.pods, view=False),
        "go-burst": lambda: go_burst_figures(cluster, api, work / "go-burst", args.rounds),
        "go-events": lambda: go_event_figures(cluster, api, work / "go-events", args),
    }


def go_figures(
    cluster: Cluster, api: KubeApi, work: Path, samples: int, view: bool = True
) -> list[Figure]:
    """Ours against the Go peers (issue 41); imported here, as it builds Go only then."""
    import bench_go_peers

    return bench_go_peers.pod_start(cluster, api, work, samples, view=view)


def go_burst_figures(cluster: Cluster, api: KubeApi, work: Path, rounds: int) -> list[Figure]:
    """1, 10 and 50 pods at once, ours against the Go peers (issue 41)."""
    import bench_go_burst

    return bench_go_burst.bursts(cluster, api, work, rounds)


def go_event_figures(cluster: Cluster, api: KubeApi, work: Path, args: Any) -> list[Figure]:
    """Health, restart and rest, ours against the Go peers (issue 41)."""
    import bench_go_events

    return bench_go_events.figures(cluster, api, work, args.events, args.window)


def dra_phases(fmt: str) -> Any:
    """The DRA pod start phase by phase (dra_breakdown.py), if the DRA section ran: a table,
    or for ``json`` every pod's phases in seconds."""
    if "bench_dra" not in sys.modules:
        return None
    import bench_dra
    import dra_breakdown

    traces = bench_dra.BREAKDOWN
    if fmt == "json":
        return [{"kind": t.kind, "pod": t.pod, **dra_breakdown.phases(t)} for t in traces]
    if not traces:
        return None
    title = "DRA pod start, phase by phase (median ms per kind of pod, same run):"
    return f"\n{title}\n\n{dra_breakdown.table(traces, fmt)}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="kae-deviceplugin real-cluster benchmarks")
    parser.add_argument("--pods", type=int, default=10, metavar="N", help="pods of each kind [10]")
    parser.add_argument(
        "--restarts",
        type=int,
        default=5,
        metavar="N",
        help="kubelet restarts per registration mode [5]",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds allocatable must stay whole to end a restart's window [10]",
    )
    parser.add_argument(
        "--helm-repeats", type=int, default=3, metavar="N", help="helm installs and upgrades [3]"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, metavar="N", help="bursts of each size and kind [3]"
    )
    parser.add_argument(
        "--events", type=int, default=10, metavar="N", help="health flips each way per driver [10]"
    )
    parser.add_argument(
        "--window", type=float, default=30.0, metavar="S", help="idle window at rest [30]"
    )
    parser.add_argument("--smoke", action="store_true", help="one sample of everything: runs only")
    parser.add_argument("--only", metavar="S,S", help=f"sections of {', '.join(SECTIONS)}")
    parser.add_argument(
        "--go", action="store_true", help=f"only the Go peer comparison ({', '.join(GO_SECTIONS)})"
    )
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results as JSON")
    parser.add_argument(
        "--workdir", type=Path, metavar="DIR", help="keep trees and plugin logs here [a temp dir]"
    )
    args = parser.parse_args(argv)
    for name in ("pods", "restarts", "helm_repeats", "rounds", "events"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.only and set(args.only.split(",")) - set(SECTIONS):
        parser.error(f"unknown sections: {args.only} (of {', '.join(SECTIONS)})")
    if args.smoke:
        args.pods, args.restarts, args.helm_repeats, args.settle = 1, 1, 1, 3.0
        args.rounds, args.events, args.window = 1, 1, 3.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("cluster.py: needs root (device nodes, the kubelet's directories)", file=sys.stderr)
        return 2
    wanted = set(args.only.split(",")) if args.only else set(DEFAULT_SECTIONS)
    if args.go:
        wanted = set(GO_SECTIONS)
    info = machine()
    figures: list[Figure] = []
    ok = True
    with running_cluster() as cluster, tempfile.TemporaryDirectory(prefix="kae-bench-") as tmp:
        api = KubeApi.from_kubeconfig(cluster.kubeconfig)
        work = args.workdir or Path(tmp)
        if "pods" in wanted:

            def pods() -> list[Figure]:
                with served_plugin(cluster, work / "pods", "plugin-watcher"):
                    return [pod_start(cluster, api, args.pods)]

            ok &= section("pods", pods, figures)
        if "restart" in wanted:
            for mode in ("plugin-watcher", "kubelet-socket"):
                restart = functools.partial(
                    kubelet_restart,
                    cluster,
                    api,
                    work,
                    mode,
                    restarts=args.restarts,
                    settle=args.settle,
                )
                ok &= section(f"restart ({mode})", lambda r=restart: [r()], figures)
        if "dra" in wanted:
            ok &= section(
                "dra", lambda: dra_figures(cluster, api, work / "dra", args.pods), figures
            )
        for name, measure in go_sections(cluster, api, work, args).items():
            if name in wanted:
                ok &= section(name, measure, figures)
        if "helm" in wanted:
            ok &= section("helm", lambda: helm_figures(cluster, args.helm_repeats), figures)
    print(render(figures, info, args.format))
    phases = dra_phases(args.format)
    if phases:
        print(phases)
    if args.json is not None:
        document = as_json(figures, info)
        document["dra_phases"] = dra_phases("json")
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
