"""One workload of the scheduling benchmark: N pods created at once, timed to their binding.

A watch on the namespace's pods, opened before the first create, stamps each pod when the event
showing its ``spec.nodeName`` arrives; a pod's create stamp is taken just before its POST. The
rate is the pods bound over the time from the first create to the last binding. Afterwards every
pod is deleted (grace 0: no kubelet has to agree) and the run waits until no ResourceClaim is
left in the namespace, so the next workload starts from empty nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx2 as httpx
from sched_objects import NAMESPACE, RESOURCE, Json, Kube, bounded, pod_body

from kae_deviceplugin.dra.slice_devices import NUMA_NODE

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
CLAIMS = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
CLEAN_WAIT = 300.0


_EXTENSION = "scheduler_framework_extension_point_duration_seconds_sum{extension_point="
SUMS = {
    "algorithm": "scheduler_scheduling_algorithm_duration_seconds_sum",
    "filter": _EXTENSION + '"Filter"',
    "prebind": _EXTENSION + '"PreBind"',
}


class Metrics:
    """The scheduler's own time, from its /metrics: the sums of its histograms of the whole
    scheduling algorithm (PreFilter to Score, one pod after the other) and of the Filter and
    PreBind extension points (all attempts, whatever their outcome)."""

    def __init__(self, port: int) -> None:
        self.url = f"https://127.0.0.1:{port}/metrics"
        self.client = httpx.AsyncClient(verify=False, timeout=30.0)  # its self-signed certificate

    async def seconds(self) -> dict[str, float]:
        text = (await self.client.get(self.url)).text
        found = dict.fromkeys(SUMS, 0.0)
        for line in text.splitlines():
            for key, prefix in SUMS.items():
                if line.startswith(prefix):
                    found[key] += float(line.rsplit(" ", 1)[1])
        return found

    async def close(self) -> None:
        await self.client.aclose()


@dataclass(frozen=True)
class Workload:
    key: str
    label: str
    template: str | None = None  # a ResourceClaimTemplate of sched_objects.TEMPLATES
    extended: str | None = None  # an extended resource in the limits
    slices: str = ""  # "full", "minimal" or "" (device-plugin nodes, no slices)


@dataclass
class Outcome:
    """One run of a workload: per pod its create and bind stamps, and what went wrong."""

    workload: Workload
    created: dict[str, float] = field(default_factory=dict)
    created_done: float = 0.0
    bound: dict[str, float] = field(default_factory=dict)
    unschedulable: Counter[str] = field(default_factory=Counter)
    checks: list[str] = field(default_factory=list)
    watch_errors: list[str] = field(default_factory=list)
    load: float = 0.0
    scheduler: dict[str, float] = field(default_factory=dict)  # its own seconds, by phase

    @property
    def latencies(self) -> list[float]:
        return [self.bound[p] - self.created[p] for p in self.bound if p in self.created]

    @property
    def span(self) -> float:
        return max(self.bound.values()) - min(self.created.values()) if self.bound else 0.0


async def _watch(kube: Kube, version: str, out: Outcome) -> None:
    """Stamp bindings as they arrive; a watch that ends or fails is resumed from the last
    version seen (a 410 Gone re-lists: pods bound meanwhile are stamped at the list)."""
    while True:
        try:
            async for event in kube.watch(PODS, version):
                obj = event["object"]
                if event["type"] == "ERROR":
                    raise RuntimeError(f"watch error: {obj.get('message', obj)}")
                version = obj["metadata"]["resourceVersion"]
                _seen(obj, out)
        except (RuntimeError, ValueError, KeyError, httpx.HTTPError) as err:
            out.watch_errors.append(str(err)[:200])
            listed = await kube.call("GET", PODS)
            for obj in listed["items"]:
                _seen(obj, out)
            version = listed["metadata"]["resourceVersion"]


def _seen(obj: Json, out: Outcome) -> None:
    name = obj["metadata"]["name"]
    if obj.get("spec", {}).get("nodeName") and name not in out.bound:
        out.bound[name] = time.monotonic()
    for cond in obj.get("status", {}).get("conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            out.unschedulable[str(cond.get("message", ""))[:200]] += 1


async def run_workload(
    kube: Kube, work: Workload, pods: int, timeout: float, metrics: Metrics | None = None
) -> Outcome:
    out = Outcome(work, load=_load())
    before = await metrics.seconds() if metrics else {}
    listed = await kube.call("GET", PODS)
    watcher = asyncio.create_task(_watch(kube, listed["metadata"]["resourceVersion"], out))
    await asyncio.sleep(0.2)  # the watch request is on its way before the first create

    async def create(name: str) -> None:
        out.created[name] = time.monotonic()
        await kube.call("POST", PODS, pod_body(name, work.template, work.extended))

    names = [f"{work.key.replace('_', '-')}-{i:05d}" for i in range(pods)]
    try:
        await bounded(create, names)
        out.created_done = time.monotonic()
        deadline = time.monotonic() + timeout
        while len(out.bound) < pods and time.monotonic() < deadline and not watcher.done():
            await asyncio.sleep(0.05)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
    if metrics:
        after = await metrics.seconds()
        out.scheduler = {k: after[k] - before[k] for k in after}
    if len(out.bound) < pods:
        out.checks.append(await unbound(kube, pods - len(out.bound)))
    if work.slices:  # a claim per pod: from the template, or the scheduler's for (b)
        out.checks += await check_claims(kube, work, len(out.bound))
    return out


async def unbound(kube: Kube, missing: int) -> str:
    """Why pods are not bound, as the API has it."""
    pods = (await kube.call("GET", PODS))["items"]
    waiting = [p for p in pods if not p["spec"].get("nodeName")]
    conditions = [c for p in waiting[:1] for c in p.get("status", {}).get("conditions", [])]
    return f"{missing} pods not bound by the deadline ({len(waiting)} in the API): {conditions}"


def _load() -> float:
    import os

    return os.getloadavg()[0]


async def check_claims(kube: Kube, work: Workload, bound: int) -> list[str]:
    """Every bound pod has an allocated claim (for an extended resource on DRA nodes, the one
    the scheduler made), and the NUMA pair's devices are on one NUMA node."""
    claims = (await kube.call("GET", CLAIMS))["items"]
    allocated = [c for c in claims if c.get("status", {}).get("allocation")]
    problems = [] if len(allocated) >= bound else [f"{bound} pods bound, {len(allocated)} claims"]
    if work.template == "numa-pair":
        numa = await device_numa(kube)
        for claim in allocated:
            results = claim["status"]["allocation"]["devices"]["results"]
            nodes = {numa.get((r["pool"], r["device"])) for r in results}
            if len(results) != 2 or len(nodes) != 1:
                problems.append(f"claim {claim['metadata']['name']}: {results}")
    return problems[:5]


async def device_numa(kube: Kube) -> dict[tuple[str, str], Any]:
    slices = (await kube.call("GET", f"{RESOURCE}/resourceslices"))["items"]
    return {
        (s["spec"]["pool"]["name"], d["name"]): d["attributes"][NUMA_NODE]["int"]
        for s in slices
        for d in s["spec"]["devices"]
    }


async def clean(kube: Kube) -> float:
    """Delete every pod (grace 0) and wait until no pod and no claim is left; the seconds."""
    started = time.monotonic()
    await kube.call("DELETE", PODS, {"gracePeriodSeconds": 0})
    deadline = started + CLEAN_WAIT
    while time.monotonic() < deadline:
        pods = (await kube.call("GET", PODS + "?limit=1"))["items"]
        claims = (await kube.call("GET", CLAIMS))["items"]
        if not pods and not claims:
            return time.monotonic() - started
        if not pods:
            # A claim that outlived its pod and is not being deleted: delete it.
            stale = [
                c["metadata"]["name"] for c in claims if not c["metadata"].get("deletionTimestamp")
            ]
            await bounded(lambda c: kube.call("DELETE", f"{CLAIMS}/{c}", ok=(404,)), stale)
        await asyncio.sleep(0.5)
    raise TimeoutError(f"pods or claims left after {CLEAN_WAIT:.0f} s")


def rate(out: Outcome) -> float:
    return len(out.bound) / out.span if out.span else 0.0


def creation_rate(out: Outcome) -> float:
    first = min(out.created.values())
    return len(out.created) / (out.created_done - first) if out.created_done > first else 0.0


def summary(out: Outcome) -> Json:
    return {
        "workload": out.workload.key,
        "pods": len(out.created),
        "bound": len(out.bound),
        "rate": rate(out),
        "creation_rate": creation_rate(out),
        "unschedulable": dict(out.unschedulable.most_common(3)),
        "checks": out.checks,
        "watch_errors": out.watch_errors[:3],
        "load": out.load,
        "scheduler": out.scheduler,
    }
