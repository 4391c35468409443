"""What a fleet costs the API server (issue 21 item 5): ``python benchmarks/fleet.py``.

Runs the real SlicePublisher for N synthetic nodes of 18 devices each, all in this process and
event loop, against the API server of ``$KUBECONFIG`` through the driver's own client, one client
per node; prints API writes, reads and bytes at start, per change and at rest, slices per node,
the CPU of the API server and etcd, and an extrapolation to 10,000 nodes. The synthetic nodes
(``kae-fleet-NNNN``) and their slices are deleted at the end. ``--in-memory`` runs against the
tests' in-memory API server instead (no CPU figures). See benchmarks/README.md, "Fleet".
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

# The in-memory server lives with the tests; this script runs from benchmarks/.
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_core import Figure, as_json, machine, median, p99, progress, render  # noqa: E402
from bench_fleet import FLEET_DRIVER, inventories  # noqa: E402
from bench_fleet_run import SMOKE, Bench, Phase, Plan, component_pids, run_size  # noqa: E402

from kae_deviceplugin.apiserver.seam import ApiServer  # noqa: E402
from kae_deviceplugin.dra.publisher import MIN_INTERVAL  # noqa: E402

EXTRAPOLATE_TO = 10_000
DEFAULT_STATE = Path("/var/tmp/kae-e2e")


def _fig(key: str, label: str, unit: str, value: float | None, **kw: Any) -> Figure:
    return Figure(key, label, unit, value, **kw)


def _net_cpu(ph: Phase, base: Phase, name: str) -> float | None:
    """CPU seconds of ``name`` in ``ph`` less what it spends anyway (the baseline's rate)."""
    rate = base.cpu_rate(name)
    return None if rate is None or name not in ph.cpu else ph.cpu[name] - rate * ph.seconds


def _pct(ph: Phase, name: str) -> float | None:
    rate = ph.cpu_rate(name)
    return None if rate is None else 100 * rate


def start_figures(r: dict[str, Any]) -> list[Figure]:
    n, start, base = r["nodes"], r["start"], r["baseline"]
    k, c = f"fleet{n}_", start.counts
    figures = [
        _fig(k + "start_writes", f"{n} nodes: start, writes per node", "writes", c.writes / n,
             target="1", met=c.writes <= n,
             note=f"{c.failed} calls failed and were retried" if c.failed else ""),
        _fig(k + "start_reads", f"{n} nodes: start, reads per node", "reads", c.reads / n,
             note=f"and {c.watches / n:.0f} watch per node"),
        _fig(k + "start_sent", f"{n} nodes: start, bytes sent per node", "B", c.sent / n),
        _fig(k + "start_received", f"{n} nodes: start, bytes received per node", "B",
             c.received / n, note="answers and watch events, as compact JSON"),
        _fig(k + "start_time", f"{n} nodes: start to every pool published", "s",
             r["published_s"], note=f"load {start.load:.1f} at its end"),
        _fig(k + "slices", f"{n} nodes: slices per node", "slices", r["slices_per_node"]),
        _fig(k + "client_rss", f"{n} nodes: this process's RSS, all publishers running", "MiB",
             r["client_rss_mib"], note=f"CPU {start.cpu['client']:.1f} s during the start"),
    ]  # fmt: skip
    for name, short in (("kube-apiserver", "API server"), ("etcd", "etcd")):
        net = _net_cpu(start, base, name)
        per_write = None if net is None or not c.writes else 1000 * net / c.writes
        figures.append(
            _fig(k + f"start_cpu_{short.split()[0].lower()}",
                 f"{n} nodes: start, {short} CPU (net of its baseline)", "s", net,
                 note="n/a (no pid file)" if net is None
                 else f"{per_write:.2f} ms per node (its TLS handshake, list, create, watch)")
        )  # fmt: skip
    growth = r["server_rss_growth_mib"].get("kube-apiserver")
    if growth is not None:
        figures.append(_fig(k + "apiserver_rss", f"{n} nodes: API server RSS growth at start",
                            "MiB", growth, note="RSS, not heap: Go returns freed memory late,"
                            " so an earlier run's can show here (even below 0)"))  # fmt: skip
    return figures


def rest_figures(r: dict[str, Any]) -> list[Figure]:
    n, rest, base = r["nodes"], r["rest"], r["baseline"]
    k, c = f"fleet{n}_", rest.counts
    figures = [
        _fig(k + "rest_writes", f"{n} nodes: at rest, writes in {rest.seconds:.0f} s", "writes",
             c.writes, target="0", met=c.writes == 0),
        _fig(k + "rest_requests", f"{n} nodes: at rest, requests in {rest.seconds:.0f} s",
             "requests", c.requests, note=f"{c.events} watch events, {c.failed} failed"),
    ]  # fmt: skip
    for name, short in (("kube-apiserver", "API server"), ("etcd", "etcd")):
        now, then = _pct(rest, name), _pct(base, name)
        figures.append(
            _fig(k + f"rest_cpu_{short.split()[0].lower()}", f"{n} nodes: at rest, {short} CPU",
                 "% of a core", now, ratio=None if not then or now is None else now / then,
                 reference="" if then is None else f"the same nodes, no publisher: {then:.2f} %",
                 note="" if now is not None else "n/a (no pid file)")
        )  # fmt: skip
    return figures


def change_figures(r: dict[str, Any]) -> list[Figure]:
    n, k = r["nodes"], f"fleet{r['nodes']}_"
    figures = []
    kinds = (("flip_taint", "health flip, tainted"), ("flip_removal", "health flip, removed"),
             ("hotplug", "hotplug (a VF added)"))  # fmt: skip
    latencies: list[float] = []
    for key, label in kinds:
        ph: Phase = r[key]
        writes, sent = ph.samples["writes"], ph.samples["sent"]
        latencies += ph.samples["latency"]
        unwritten = sum(1 for w in writes if not w)
        note = f"{len(writes)} changes on {len(writes) // 2} nodes, each one way and back"
        if unwritten:
            note += f"; {unwritten} changes NOT WRITTEN (the publisher found them equal)"
        figures += [
            _fig(k + key + "_writes", f"{n} nodes: {label}, writes per change", "writes",
                 ph.counts.writes / len(writes), p99=p99(writes), target="1",
                 met=ph.counts.writes == len(writes), samples=writes, note=note),
            _fig(k + key + "_sent", f"{n} nodes: {label}, bytes sent per change written", "B",
                 median(sent) if sent else None, p99=p99(sent) if sent else None, samples=sent),
        ]  # fmt: skip
    figures.append(
        _fig(k + "change_latency", f"{n} nodes: change published to write answered", "s",
             median(latencies), p99=p99(latencies), target="<= 1 s", met=p99(latencies) <= 1.0,
             samples=latencies, note="client side, polled every 5 ms")
    )  # fmt: skip
    for key, label, target in (("flap_free", "no rate limit", ""),
                               ("flap_limited", f"rate limit {MIN_INTERVAL} s",
                                f"<= {1 / MIN_INTERVAL:.0f} /s")):  # fmt: skip
        ph = r[key]
        rate = ph.counts.writes / ph.seconds
        figures.append(
            _fig(k + key, f"{n} nodes: one device flapping every 100 ms, {label}", "writes/s",
                 rate, target=target, met=None if not target else rate <= 1 / MIN_INTERVAL + 0.1,
                 note=f"{ph.counts.requests / ph.seconds:.1f} requests/s")
        )  # fmt: skip
    return figures


def extrapolation(r: dict[str, Any]) -> str:
    """Markdown: the largest fleet's per-node figures times EXTRAPOLATE_TO."""
    n, start, base, flip = r["nodes"], r["start"], r["baseline"], r["flip_taint"]
    scale = EXTRAPOLATE_TO / n
    lines = [f"| figure | measured, {n} nodes | {EXTRAPOLATE_TO:,} nodes | method |"]
    lines.append("|---|---|---|---|")
    rows = [("start, writes", start.counts.writes, "linear in nodes: one create per node"),
            ("start, bytes sent", start.counts.sent, "linear in nodes")]  # fmt: skip
    for name in ("kube-apiserver", "etcd"):
        net = _net_cpu(start, base, name)
        if net is not None:
            rows.append((f"start, {name} CPU s", net, "CPU per node started, measured, x nodes"))
    for label, value, method in rows:
        shown = f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
        lines.append(f"| {label} | {shown} | {value * scale:,.0f} | {method} |")
    per_flip = flip.counts.writes / len(flip.samples["writes"])
    hourly = EXTRAPOLATE_TO * 2 * per_flip / 3600  # a flip and its recovery
    flip_bytes = median(flip.samples["sent"]) if flip.samples["sent"] else 0.0
    lines += [
        f"| at rest, writes | {r['rest'].counts.writes} | {r['rest'].counts.writes * scale:.0f} "
        "| linear in nodes |",
        f"| a health flip on one node | {per_flip:.2g} write, {flip_bytes:,.0f} B | the same "
        "| per node, whatever the fleet size |",
        f"| every node: a health flip and its recovery an hour | | {hourly:.1f} writes/s "
        "| 2 changes x the writes per change measured |",
    ]
    return "\n".join(lines)


def connections(args: argparse.Namespace) -> tuple[ApiServer, Any]:
    """The admin client and a factory of one client per node."""
    if args.in_memory:
        from tests.support.fake_apiserver import FakeApiServer

        fake = FakeApiServer()
        return fake, lambda: fake
    from kae_deviceplugin.apiserver.rest_api import connect

    kubeconfig = Path(args.kubeconfig)
    return connect(kubeconfig), lambda: connect(kubeconfig)


async def measure(args: argparse.Namespace, plan: Plan) -> list[dict[str, Any]]:
    admin, connect_one = connections(args)
    state = Path(os.environ.get("KAE_E2E_STATE", DEFAULT_STATE))
    pids = {} if args.in_memory else component_pids(state)
    results = []
    try:
        for n in plan.sizes:
            progress(f"fleet of {n} nodes ...")
            bench = Bench(admin, connect_one, args.driver, inventories(), plan, pids)
            results.append(await run_size(bench, n))
    finally:
        await admin.close()
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="what a fleet of DRA nodes costs the API server")
    parser.add_argument("--nodes", metavar="N,N", help="fleet sizes [100,1000]")
    parser.add_argument("--rest", type=float, metavar="S", help="at-rest and baseline window [60]")
    parser.add_argument("--changes", type=int, metavar="K", help="nodes per kind of change [20]")
    parser.add_argument("--smoke", action="store_true", help="3 nodes, seconds: runs only")
    parser.add_argument("--in-memory", action="store_true", help="the tests' in-memory server")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    parser.add_argument("--driver", default=FLEET_DRIVER, help=f"slices' driver [{FLEET_DRIVER}]")
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results as JSON")
    args = parser.parse_args(argv)
    if not args.in_memory and not args.kubeconfig:
        parser.error("no cluster: set KUBECONFIG or --kubeconfig (or use --in-memory)")
    return args


def plan_from(args: argparse.Namespace) -> Plan:
    plan = SMOKE if args.smoke else Plan()
    if args.nodes:
        plan = dataclasses.replace(plan, sizes=tuple(int(n) for n in args.nodes.split(",")))
    if args.rest is not None:
        plan = dataclasses.replace(plan, rest=args.rest)
    if args.changes is not None:
        plan = dataclasses.replace(plan, changes=args.changes)
    if args.in_memory:
        plan = dataclasses.replace(plan, controller_wait=0.0)
    return plan


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = plan_from(args)
    info = machine() | {"server": "in-memory" if args.in_memory else args.kubeconfig}
    results = asyncio.run(measure(args, plan))
    figures = [
        f for r in results for f in (*start_figures(r), *rest_figures(r), *change_figures(r))
    ]
    print(render(figures, info, args.format))
    print(f"\nExtrapolated from {results[-1]['nodes']} nodes:\n\n{extrapolation(results[-1])}")
    if args.json is not None:
        document = as_json(figures, info) | {"plan": dataclasses.asdict(plan)}
        document["deleted_nodes"] = [r["deleted_nodes"] for r in results]
        args.json.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
