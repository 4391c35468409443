"""``mode: auto`` at start: read the facts once, choose (``mode_choice``), and say it on the Node.

The facts come from the API server, asked once before the daemon starts (so auto needs API
access at start, as DRA mode does; an explicit ``mode: device-plugin`` still needs none):
discovery of ``resource.k8s.io/v1``, this node's Node (kubelet version, runtime) read with the
runtime's config file as the DRA driver reads it, and the engines' DeviceClasses read back
(``extendedResourceName`` survives only where the API server has DRAExtendedResource on: a
field whose feature is off is dropped silently). No answer within ``START_DEADLINE`` is the
soft reason ``no-api-answer``: the device plugin, which today's pods need nothing else for
(unless the node chose DRA from full facts within ``mode_choice.DAMPING``: it keeps DRA).

Then a root task of the running daemon labels the Node ``openfuyao.com/kae.mode=<mode>``,
annotates it with the reason (a label cannot hold free text) and, when the node's mode changed
since the last start, records an Event on it; it retries until the API server takes them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from kae_deviceplugin.apiserver.node_api import NodeApi
from kae_deviceplugin.apiserver.seam import DEVICE_CLASSES, NODES, JsonObject, Kind
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.runtime_cdi import CONTAINERD_CONFIG, ISULAD_CONFIG, runtime_of
from kae_deviceplugin.core.backoff import Backoff
from kae_deviceplugin.core.engines import DRA_DRIVER, ENGINES
from kae_deviceplugin.daemon.api_access import client, node_name
from kae_deviceplugin.daemon.mode_choice import Choice, Chosen, Facts, decide
from kae_deviceplugin.daemon.mode_state import read_choice, write_choice
from kae_deviceplugin.daemon.preflight import Label
from kae_deviceplugin.errors import ApiError

log = logging.getLogger(__name__)

MODE_LABEL: Final = "openfuyao.com/kae.mode"
REASON_ANNOTATION: Final = "openfuyao.com/kae.mode-reason"
EVENT_REASON: Final = "KaeModeChanged"
EVENT_NAMESPACE: Final = "default"  # where the kubelet records a Node's events too
EVENTS: Final = Kind("", "v1", "Event", "events", namespaced=True)
START_DEADLINE: Final = 30.0  # for all the facts: a start is not held longer than this
MAX_REASON: Final = 1024  # characters of the annotation: a reason is one line, not a log
MARK_BACKOFF: Final = (2.0, 300.0)  # first and longest wait before labelling again


@dataclass(frozen=True, slots=True)
class Decision:
    """What the start decided: the choice, and the mode before it (the Node's label, else the
    state file's; None on a first choice), which tells whether an Event is due."""

    choice: Choice
    previous: Chosen | None


def class_name(engine: str) -> str:
    return f"{engine}.{DRA_DRIVER}"


async def _extended_resources(api: NodeApi, engines: list[str]) -> tuple[bool | None, str]:
    """Whether every enabled engine's DeviceClass kept its ``extendedResourceName``."""
    for engine in engines:
        name = class_name(engine)
        try:
            found = await api.get(DEVICE_CLASSES, name)
        except ApiError as err:
            if err.status != 404:
                raise
            return None, f"DeviceClass {name} does not exist (the chart's dra.deviceClasses)"
        wanted = f"openfuyao.com/kae.{engine}"
        kept = (found.get("spec") or {}).get("extendedResourceName")
        if kept != wanted:
            return False, (
                f"DeviceClass {name} has no extendedResourceName {wanted} (DRAExtendedResource "
                "off in the API server, or the chart's dra.extendedResources=false): limits: "
                "pods would stay Pending on a DRA node"
            )
    return True, ""


async def read_facts(api: NodeApi, node: str, settings: Settings) -> tuple[Facts, JsonObject]:
    """The facts, and the Node as read (empty where the API did not answer)."""
    try:
        async with asyncio.timeout(START_DEADLINE):
            if not await api.serves("resource.k8s.io", "v1"):
                return Facts(True, dra_v1=False), await api.get(NODES, node)
            found = await api.get(NODES, node)
            engines = [e.name for e in ENGINES if settings.engine(e.name).enabled]
            extended, detail = await _extended_resources(api, engines)
    except (ApiError, TimeoutError) as err:
        problem = str(err) or f"no answer within {START_DEADLINE:g} s"
        return Facts(False, api_problem=problem), {}
    chosen = settings.runtime_config  # else the runtimes' own paths, as the DRA driver reads
    cdi = runtime_of(found, chosen or CONTAINERD_CONFIG, chosen or ISULAD_CONFIG)
    info: Mapping[str, Any] = (found.get("status") or {}).get("nodeInfo") or {}
    version = str(info.get("kubeletVersion") or "")
    return Facts(True, True, version, cdi, extended, detail), found


def _label_of(node: JsonObject) -> Chosen | None:
    value = ((node.get("metadata") or {}).get("labels") or {}).get(MODE_LABEL)
    return value if value in ("device-plugin", "dra") else None


async def _decide(settings: Settings, node: str, api: NodeApi) -> Decision:
    try:
        facts, found = await read_facts(api, node, settings)
    finally:
        await api.close()
    recorded = read_choice(settings.state_dir)
    last = None if recorded is None else recorded.last
    choice = decide(facts, settings.auto_prefer, last, time.time())
    write_choice(settings.state_dir, choice)
    previous = _label_of(found) or (None if last is None else last.mode)
    return Decision(choice, previous)


def choose(settings: Settings, node: str, api: NodeApi) -> Decision:
    """Decide before the daemon's loop starts (its own short loop); logs the choice."""
    decision = asyncio.run(_decide(settings, node, api))
    choice = decision.choice
    log.info("mode auto chose %s (%s): %s", choice.mode, choice.reason.code, choice.detail)
    return decision


def node_patch(choice: Choice) -> JsonObject:
    """The merge patch of the Node: the mode label and the reason annotation, nothing else."""
    reason = f"{choice.reason.code}: {choice.detail}"[:MAX_REASON]
    return {"metadata": {"labels": {MODE_LABEL: choice.mode},
                         "annotations": {REASON_ANNOTATION: reason}}}  # fmt: skip


def mode_event(node: JsonObject, decision: Decision, now: datetime) -> JsonObject:
    """A core/v1 Event on the Node saying it moved from one mode to the other, and why."""
    choice, name = decision.choice, node["metadata"]["name"]
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"generateName": f"{name}.kae-mode-", "namespace": EVENT_NAMESPACE},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Node",
            "name": name,
            "uid": node["metadata"].get("uid", ""),
        },
        "reason": EVENT_REASON,
        "message": f"KAE devices served by {choice.mode}, was {decision.previous}: "
        f"{choice.reason.code}: {choice.detail}"[:MAX_REASON],
        "type": "Normal",
        "source": {"component": "kae-deviceplugin", "host": name},
        "reportingComponent": "kae-deviceplugin",
        "reportingInstance": name,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


async def mark_node(api: NodeApi, node: str, decision: Decision) -> None:
    """Label and annotate the Node (ApiError if refused), then an Event if the mode changed."""
    patched = await api.merge_patch(NODES, node, node_patch(decision.choice))
    previous = decision.previous
    if previous is None or previous == decision.choice.mode:
        return
    try:
        await api.create(EVENTS, mode_event(patched, decision, datetime.now(UTC)))
    except ApiError as err:  # the label says it; an Event is not worth a retry loop
        log.warning("cannot record the mode change on node %s as an Event: %s", node, err)


class MarkNode:
    """The root task that says the choice on the Node, retrying (with backoff) until it is
    taken: an API server away at start, an RBAC or admission refusal someone then fixes."""

    def __init__(self, api: NodeApi, node: str, decision: Decision) -> None:
        self.api, self.node, self.decision = api, node, decision
        self.backoff = Backoff(*MARK_BACKOFF)
        self.done = asyncio.Event()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    await mark_node(self.api, self.node, self.decision)
                except ApiError as err:
                    delay = self.backoff.failed("node", loop.time())
                    log.warning("cannot label node %s with its mode (again in %.0f s): %s",
                                self.node, delay, err)  # fmt: skip
                    await asyncio.sleep(delay)
                    continue
                self.done.set()
                return
        finally:
            await self.api.close()


def start_auto(settings: Settings, label: Label) -> tuple[Settings, MarkNode]:
    """``mode: auto``'s start: the node's name and client (refused in one line as DRA mode
    refuses them), the decision, the settings with the chosen mode, and the task that says it
    on the Node."""
    node = node_name(settings)
    decision = choose(settings, node, NodeApi.of(client(settings, label)))
    chosen = dataclasses.replace(settings, mode=decision.choice.mode)
    return chosen, MarkNode(NodeApi.of(client(settings, label)), node, decision)
