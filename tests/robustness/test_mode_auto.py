"""``serve --mode auto`` (a real process) against the HTTP test API server: it chooses DRA where
the API server, the kubelet, the runtime and the DeviceClasses allow it and the device plugin
elsewhere, says which and why on its Node (label, annotation), in its metrics and, when the mode
changed since the last start, in an Event; and damps a flip for a reason that only means "could
not tell" (the API server away at start)."""

from __future__ import annotations

import urllib.request
from typing import Any

from kae_deviceplugin.daemon.mode_auto import MODE_LABEL, REASON_ANNOTATION
from kae_deviceplugin.daemon.mode_state import STATE_FILE
from tests.support.dra_process import NODE, DraNode, DraProcess, dra_process
from tests.support.http_apiserver import HttpApiServer

DEADLINE = 10.0
RETRY = 15.0  # a label the API server refused is written again within the first backoffs
CDI_OFF = '[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = false\n'
CDI_ON = '[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n'


def seed_cluster(
    api: HttpApiServer, *, kubelet: str = "v1.37.2", runtime: str = "containerd://2.1.4",
    extended: bool = True,
) -> None:  # fmt: skip
    """This node's Node (its kubelet and runtime) and the chart's three DeviceClasses."""
    info = {"kubeletVersion": kubelet, "containerRuntimeVersion": runtime}
    api.seed("nodes", {"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": NODE, "uid": "node-uid-1", "labels": {"zone": "a"}},
                       "spec": {}, "status": {"nodeInfo": info}})  # fmt: skip
    for engine in ("hpre", "sec", "zip"):
        spec: dict[str, Any] = {"selectors": []}
        if extended:
            spec["extendedResourceName"] = f"openfuyao.com/kae.{engine}"
        api.seed("deviceclasses", {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                   "metadata": {"name": f"{engine}.kae.openfuyao.com"},
                                   "spec": spec})  # fmt: skip


def runtime_config(node: DraNode, text: str) -> list[str]:
    path = node.workdir / "config.toml"
    path.write_text(text)
    return ["--runtime-config", str(path)]


def the_node(api: HttpApiServer) -> dict[str, Any]:
    return api.store.get("nodes", None, NODE)


def labelled(api: HttpApiServer, mode: str) -> bool:
    return (the_node(api)["metadata"].get("labels") or {}).get(MODE_LABEL) == mode


def reason_of(api: HttpApiServer) -> str:
    return str((the_node(api)["metadata"].get("annotations") or {}).get(REASON_ANNOTATION, ""))


def mode_events(api: HttpApiServer) -> list[dict[str, Any]]:
    return [e for e in api.store.all("events") if e.get("reason") == "KaeModeChanged"]


def metrics(daemon: DraProcess) -> str:
    url = f"http://127.0.0.1:{daemon.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=DEADLINE) as answer:
        return str(answer.read().decode())


def mode_series(daemon: DraProcess) -> list[str]:
    """The ``kae_mode_info`` sample lines, once the endpoint answers."""
    found: list[str] = []

    def scraped() -> bool:
        try:
            found[:] = [line for line in metrics(daemon).splitlines()
                        if line.startswith("kae_mode_info{")]  # fmt: skip
        except OSError:
            return False
        return bool(found)

    assert daemon.wait_for(scraped, DEADLINE), daemon.describe()
    return found


def serves_dra(daemon: DraProcess) -> bool:
    return daemon.wait_registration_socket(DEADLINE)


def test_auto_chooses_dra_where_every_check_passes_and_labels_its_node(
    api: HttpApiServer, node: DraNode
) -> None:
    """A 1.37 kubelet, containerd 2 and DeviceClasses that kept extendedResourceName: DRA (the
    driver's registration socket appears), the Node labelled dra with the reason annotated and
    no other label touched, kae_mode_info saying so, the choice recorded; no Event on a first
    choice."""
    seed_cluster(api)
    with dra_process(node, api, mode="auto") as daemon:
        assert api.wait_for(lambda: labelled(api, "dra"), DEADLINE), daemon.describe()
        assert serves_dra(daemon), daemon.describe()
        assert reason_of(api).startswith("dra-ready: kubelet v1.37.2, containerd 2.1.4")
        assert the_node(api)["metadata"]["labels"]["zone"] == "a"
        series = mode_series(daemon)
        assert series == ['kae_mode_info{configured="auto",mode="dra",reason="dra-ready"} 1.0']
    assert mode_events(api) == []
    assert '"mode": "dra"' in (node.workdir / "state" / STATE_FILE).read_text()


def test_auto_chooses_the_device_plugin_where_cdi_is_off_and_names_the_setting(
    api: HttpApiServer, node: DraNode
) -> None:
    """containerd 1.7.35 whose config says enable_cdi = false: the device plugin (no DRA socket,
    no slice), and the reason on the Node names the runtime and the setting to change."""
    seed_cluster(api, runtime="containerd://1.7.35")
    args = runtime_config(node, CDI_OFF)
    with dra_process(node, api, mode="auto", args=args) as daemon:
        assert api.wait_for(lambda: labelled(api, "device-plugin"), DEADLINE), daemon.describe()
        reason = reason_of(api)
        assert reason.startswith("cdi-off: containerd 1.7.35 does not apply CDI devices"), reason
        assert "enable_cdi = true" in reason
        assert mode_series(daemon)[0].endswith('mode="device-plugin",reason="cdi-off"} 1.0')
        assert not daemon.registration_socket.exists()
        assert api.slices() == []


def test_auto_keeps_the_device_plugin_without_dra_v1_or_without_extended_resources(
    api: HttpApiServer, node: DraNode
) -> None:
    """An API server that serves no resource.k8s.io/v1 (1.33), then one whose DeviceClasses
    lost extendedResourceName (DRAExtendedResource off): the device plugin, each reason said."""
    seed_cluster(api, extended=False)
    api.served.clear()
    with dra_process(node, api, mode="auto", tag="no-v1") as daemon:
        assert api.wait_for(lambda: labelled(api, "device-plugin"), DEADLINE), daemon.describe()
        assert reason_of(api).startswith("no-dra-v1-api: "), reason_of(api)
    api.served.add("resource.k8s.io/v1")
    with dra_process(node, api, mode="auto", tag="no-extended") as daemon:
        assert api.wait_for(
            lambda: reason_of(api).startswith("no-extended-resources: DeviceClass hpre."),
            DEADLINE,
        ), (reason_of(api), daemon.describe())
        assert labelled(api, "device-plugin")


def test_a_node_whose_runtime_is_fixed_moves_to_dra_and_back_with_an_event_each_way(
    api: HttpApiServer, node: DraNode
) -> None:
    """CDI off: the device plugin. The runtime fixed and the daemon restarted: DRA, with an
    Event on the Node naming both modes and the reason. CDI off again (a hard reason): back to
    the device plugin at once, despite the DRA choice a moment ago, with a second Event."""
    seed_cluster(api, runtime="containerd://1.7.35")
    path = node.workdir / "config.toml"
    args = runtime_config(node, CDI_OFF)
    with dra_process(node, api, mode="auto", args=args, tag="off") as daemon:
        assert api.wait_for(lambda: labelled(api, "device-plugin"), DEADLINE), daemon.describe()
    path.write_text(CDI_ON)
    with dra_process(node, api, mode="auto", args=args, tag="on") as daemon:
        assert api.wait_for(lambda: len(mode_events(api)) == 1, DEADLINE), daemon.describe()
        assert labelled(api, "dra") and serves_dra(daemon)
    [event] = mode_events(api)
    assert event["involvedObject"] == {
        "apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid-1"
    }  # fmt: skip
    assert event["metadata"]["namespace"] == "default"
    assert event["message"].startswith("KAE devices served by dra, was device-plugin: dra-ready")
    path.write_text(CDI_OFF)
    with dra_process(node, api, mode="auto", args=args, tag="off-again") as daemon:
        assert api.wait_for(lambda: len(mode_events(api)) == 2, DEADLINE), daemon.describe()
        assert labelled(api, "device-plugin")
        messages = [e["message"] for e in mode_events(api)]  # listed by (random) name
        assert any(m.startswith("KAE devices served by device-plugin, was dra: cdi-off: ")
                   for m in messages), messages  # fmt: skip


def test_an_api_server_away_at_start_keeps_a_recent_dra_choice_and_labels_later(
    api: HttpApiServer, node: DraNode
) -> None:
    """DRA chosen; the API server away at the next start: no answer is a soft reason, so the
    node keeps DRA (not a flip to the device plugin and back), says why in its log, and labels
    its Node with the kept choice once the API server is back."""
    seed_cluster(api)
    with dra_process(node, api, mode="auto", tag="first") as daemon:
        assert api.wait_for(lambda: labelled(api, "dra"), DEADLINE), daemon.describe()
    api.away()  # the fixture's stop() ends a server that is away too
    with dra_process(node, api, mode="auto", tag="away") as daemon:
        assert daemon.wait_log("mode auto chose dra (kept)", DEADLINE * 4), daemon.describe()
        assert serves_dra(daemon), daemon.describe()
        assert daemon.wait_log("cannot label node", DEADLINE * 4), daemon.describe()
        api.back()
        assert api.wait_for(lambda: reason_of(api).startswith("kept: "), RETRY), daemon.describe()
        assert labelled(api, "dra")
    assert mode_events(api) == []


def test_no_api_answer_and_no_previous_choice_serves_the_device_plugin(
    api: HttpApiServer, node: DraNode
) -> None:
    """A first start without an API server: the device plugin, which today's pods need
    nothing else for; the label, refused while the server is away, follows once it answers."""
    seed_cluster(api)
    api.away()
    with dra_process(node, api, mode="auto") as daemon:
        chosen = "mode auto chose device-plugin (no-api-answer)"
        assert daemon.wait_log(chosen, DEADLINE * 4), daemon.describe()
        assert daemon.wait_log("cannot label node", DEADLINE * 4), daemon.describe()
        api.back()
        assert api.wait_for(lambda: labelled(api, "device-plugin"), RETRY), daemon.describe()
        assert reason_of(api).startswith("no-api-answer: ")


def test_an_explicit_mode_says_configured_and_labels_nothing(
    api: HttpApiServer, node: DraNode
) -> None:
    """serve --mode dra: kae_mode_info says dra, configured; no discovery, no Node patch (the
    label is mode auto's alone)."""
    seed_cluster(api)
    with dra_process(node, api) as daemon:
        series = mode_series(daemon)
        assert series == ['kae_mode_info{configured="dra",mode="dra",reason="configured"} 1.0']
    asked = {(r.verb, r.resource) for r in api.faults.log}
    assert not asked & {("discover", "apis"), ("patch", "nodes")}, asked
    assert MODE_LABEL not in the_node(api)["metadata"]["labels"]
