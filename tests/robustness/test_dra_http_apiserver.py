"""The real DRA daemon (``serve --mode dra`` in a subprocess, its own client over HTTP) against a
test API server that misbehaves on purpose.

The first tests prove the server and the harness: the daemon publishes its pool owned by the
Node, prepares a claim the kubelet names, and repairs a wipe. The others are the faults of
issue 27 (FACTS §11), each of which the daemon before its fix failed: a 403 retried hundreds of
times a second, an exit when the API server was away at start, wipes lost after a 410 or a
garbage line on the watch, an unhealthy device published untainted where taints are dropped.
"""

from __future__ import annotations

import re
import time
import urllib.request
import uuid

from kae_deviceplugin.testing.sysfs_builder import set_attribute
from kae_deviceplugin.testing.sysfs_trees import large_tree
from tests.dra.node import HPRE_0, SEC_0
from tests.support.dra_claims import Result, claim_object
from tests.support.dra_kubelet import Claim
from tests.support.dra_process import (
    NODE,
    DraNode,
    DraProcess,
    device_names,
    dra_node,
    dra_process,
    owner_uids,
)
from tests.support.http_apiserver import HttpApiServer

DEADLINE = 10.0  # for what the daemon does at once (start, register, publish)
REPAIR = 5.0  # for what a fixed daemon does within a second or two
ALL_DEVICES = {
    "hpre-0000-79-00-0", "hpre-0000-b9-00-0", "sec-0000-76-00-0",
    "sec-0000-b6-00-0", "zip-0000-75-00-0", "zip-0000-b5-00-0",
}  # fmt: skip


def published(api: HttpApiServer, devices: set[str] = ALL_DEVICES) -> bool:
    """The API holds the pool's slices, with exactly ``devices``."""
    return device_names(api.slices()) == devices


def started(daemon: DraProcess, api: HttpApiServer) -> None:
    """Registered with the kubelet and the whole pool in the API, or the test fails."""
    daemon.register()
    assert api.wait_for(lambda: published(api), DEADLINE), daemon.describe()


def test_the_daemon_publishes_its_pool_and_prepares_a_claim(
    api: HttpApiServer, node: DraNode
) -> None:
    """The slices name the node, its pool and the seeded Node's UID as their owner; /readyz
    says ready; an allocated claim the kubelet names is read from the API and its CDI spec
    written, and unprepared again. The server counted each kind of request."""
    node_uid = api.seed_node(NODE)
    claim = api.seed("resourceclaims", claim_object("team-a", "c1", [Result("hpre", HPRE_0, NODE)]))
    ref = Claim("team-a", "c1", claim["metadata"]["uid"])
    with dra_process(node, api) as daemon:
        info = daemon.register()
        assert info.name == "kae.openfuyao.com" and info.endpoint == str(daemon.service_socket)
        assert api.wait_for(lambda: published(api), DEADLINE), daemon.describe()
        slices = api.slices()
        assert owner_uids(slices) == {node_uid}
        assert {(s["spec"]["nodeName"], s["spec"]["pool"]["name"]) for s in slices} == {
            (NODE, NODE)
        }
        assert daemon.wait_ready(), daemon.readyz()
        answer = daemon.prepare([ref])[ref.uid]
        assert answer.error == ""
        assert [(d.pool, d.device) for d in answer.devices] == [(NODE, HPRE_0)]
        assert node.spec_path(ref.uid).is_file()
        assert daemon.unprepare([ref]) == {ref.uid: ""}
        assert not node.spec_path(ref.uid).exists()
        assert api.faults.count("get", "nodes") == 1
        assert api.faults.count("get", "resourceclaims") == 1
        assert api.faults.count("create") == len(slices)
        assert api.wait_for(lambda: api.faults.count("watch") >= 1, DEADLINE)
        assert daemon.terminate() == 0, daemon.describe()
    assert published(api)  # SIGTERM leaves the slices: running pods need them


def test_a_wipe_is_repaired(api: HttpApiServer, node: DraNode) -> None:
    """The kubelet deletes the node's slices at its start: the daemon sees the DELETED events
    on its watch and creates them again, nothing else."""
    api.seed_node(NODE)
    with dra_process(node, api) as daemon:
        started(daemon, api)
        names = {s["metadata"]["name"] for s in api.slices()}
        before = api.faults.count("create")
        assert api.store.wipe() == len(names)
        assert api.wait_for(lambda: published(api), DEADLINE), daemon.describe()
        assert {s["metadata"]["name"] for s in api.slices()} == names
        assert api.faults.count("create") == before + len(names)
        assert api.faults.count(("update", "delete")) == 0


def test_two_instances_share_one_kubelet_root(api: HttpApiServer, node: DraNode) -> None:
    """Two daemons with their own POD_UID on one node (a rolling update): each registers its
    own sockets and answers the kubelet; the pool they both hold is created once (the one
    that comes second meets 409 AlreadyExists or finds it) and not rewritten."""
    api.seed_node(NODE)
    with (
        dra_process(node, api, pod_uid="pod-a") as first,
        dra_process(node, api, pod_uid="pod-b") as second,
    ):
        endpoints = {first.register().endpoint, second.register().endpoint}
        assert endpoints == {str(first.service_socket), str(second.service_socket)}
        assert len(endpoints) == 2 and all("pod-" in e for e in endpoints)
        assert api.wait_for(lambda: published(api), DEADLINE), first.describe()
        ref = Claim("team-a", "never-prepared", str(uuid.uuid4()))
        assert first.unprepare([ref]) == second.unprepare([ref]) == {ref.uid: ""}
        assert first.wait_ready() and second.wait_ready(), (first.readyz(), second.readyz())
        created = [r for r in api.faults.requests("create") if r.code == 201]
        assert len(created) == len(api.slices())
        assert api.faults.count(("update", "delete")) == 0


def test_a_persistent_403_on_create_is_retried_with_backoff(api: HttpApiServer) -> None:
    """Creates refused with 403 (RBAC, an admission policy) while the node's two slices are
    deleted one after the other, the second while the daemon retries the first: it backs off,
    at most 12 LISTs and CREATEs in 4 s (today over a thousand: it fails once 13 arrive)."""
    api.seed_node(NODE)
    # 70 devices: two slices, as a slice with taints holds at most 64.
    with dra_node(devices=large_tree(70)) as node, dra_process(node, api) as daemon:
        daemon.register()
        assert api.wait_for(lambda: len(device_names(api.slices())) == 70, DEADLINE)
        first, second = sorted(s["metadata"]["name"] for s in api.slices())
        api.faults.refuse("create", code=403)
        since = time.monotonic()
        api.store.delete("resourceslices", None, first)
        assert api.wait_for(lambda: api.faults.count("create", since=since) >= 1, DEADLINE)
        api.store.delete("resourceslices", None, second)

        def flooded() -> bool:
            return api.faults.count(("list", "create"), since=since) > 12

        assert not api.wait_for(flooded, 4.0), api.faults.count(("list", "create"), since=since)
        assert daemon.alive, daemon.describe()


def test_the_daemon_outlives_an_api_server_away_at_its_start(
    api: HttpApiServer, node: DraNode
) -> None:
    """The API server refuses connections when the daemon starts: the daemon still registers
    with the kubelet and answers an unprepare (from its checkpoint, needing no API), and once
    the server is back its slices appear."""
    api.seed_node(NODE)
    api.away()
    with dra_process(node, api) as daemon:
        daemon.register()
        ref = Claim("team-a", "gone", str(uuid.uuid4()))
        assert daemon.unprepare([ref]) == {ref.uid: ""}
        assert daemon.alive, daemon.describe()
        api.back()
        assert api.wait_for(lambda: published(api), DEADLINE), daemon.describe()


def test_slices_wiped_while_the_watch_ended_with_410_are_recreated(
    api: HttpApiServer, node: DraNode
) -> None:
    """The watch ends with an ERROR event holding a 410 Status, and the slices are wiped in
    the gap (their DELETED events reach no watch): the daemon re-lists and creates them."""
    api.seed_node(NODE)
    with dra_process(node, api) as daemon:
        started(daemon, api)
        assert api.store.end_watches("gone", wipe="resourceslices") >= 1
        assert api.wait_for(lambda: published(api), REPAIR), daemon.describe()


def test_slices_wiped_after_a_garbage_line_on_the_watch_are_recreated(
    api: HttpApiServer, node: DraNode
) -> None:
    """A line that is not JSON on the watch (a proxy's error page), and the slices wiped in the
    gap: the daemon watches again, re-lists and creates them."""
    api.seed_node(NODE)
    with dra_process(node, api) as daemon:
        started(daemon, api)
        assert api.store.end_watches("garbage", wipe="resourceslices") >= 1
        assert api.wait_for(lambda: published(api), REPAIR), daemon.describe()


def test_an_unhealthy_device_is_left_out_where_the_server_drops_taints(
    api: HttpApiServer, node: DraNode
) -> None:
    """A server without device taints (its feature gate off) keeps no taint: a device that
    turns unhealthy (isolated) must then leave the slice rather than stay there looking
    healthy, while the other devices stay."""
    api.seed_node(NODE)
    api.faults.drop_fields("spec.devices.taints")
    with dra_process(node, api) as daemon:
        started(daemon, api)
        set_attribute(node.root, "hisi_sec2-0", "isolate", "1")
        assert api.wait_for(lambda: published(api, ALL_DEVICES - {SEC_0}), REPAIR), (
            daemon.describe()
        )


def _watch_requests_counted(daemon: DraProcess) -> int:
    url = f"http://127.0.0.1:{daemon.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=DEADLINE) as answer:
        text = answer.read().decode()
    found = re.search(r'^kae_apiserver_requests_total\{verb="watch"\} (\S+)$', text, re.M)
    assert found is not None, text[-2000:]
    return int(float(found.group(1)))


def test_a_watch_ended_at_once_backs_off_and_every_request_is_counted(
    api: HttpApiServer, node: DraNode
) -> None:
    """The server (a proxy) ends every watch of slices at once with nothing in it: the daemon
    asks again after a growing wait, says so once at INFO, stays ready, and its metric counts
    every watch request the server saw (issue 40: ~800 a second, counted as one)."""
    api.seed_node(NODE)
    with dra_process(node, api) as daemon:
        started(daemon, api)
        api.faults.watches_end_at_once = True
        assert api.store.end_watches("clean") >= 1
        said = "the API server ends each watch of resourceslices at once"
        assert daemon.wait_log(said, DEADLINE), daemon.describe()
        before = api.faults.count("watch")
        counted = _watch_requests_counted(daemon)
        after = api.faults.count("watch")
        assert before <= counted <= after, (before, counted, after)
        assert after < 20, daemon.describe()  # 1 + 0.5 + 1 + 2 s of waits, not thousands
        assert daemon.readyz()[0] == 200, daemon.describe()
