"""The kubelet emulator's side of each plugin connection: the dial-back during Register and the
ListAndWatch stream, watched on its own thread, with the kubelet's quirk of kubernetes issue
121994 (an older stream that ends disconnects the *current* client)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import grpc

from kae_deviceplugin._generated.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from kae_deviceplugin.testing.kubelet_rules import ResourceState, all_unhealthy, device_from_message


@dataclass
class Plugin:
    """The connection to one registered plugin; replaced by the next Register for the resource."""

    endpoint: str
    channel: grpc.Channel
    stub: api_pb2_grpc.DevicePluginStub
    thread: threading.Thread | None = None
    stream: grpc.CallIterator[api_pb2.ListAndWatchResponse] | None = None


def dial_back(
    directory: Path, endpoint: str, timeout: float
) -> tuple[Plugin, api_pb2.DevicePluginOptions] | str:
    """Connect to a registering plugin and ask its options, as the kubelet does before it
    answers Register; the refusal's reason when that fails."""
    # Its own subchannels, as the kubelet dials each plugin afresh (see kubelet.dial, which
    # this independent oracle does not import).
    own = [("grpc.use_local_subchannel_pool", 1)]
    channel = grpc.insecure_channel(f"unix://{directory / endpoint}", options=own)
    stub = api_pb2_grpc.DevicePluginStub(channel)
    try:
        # wait_for_ready mirrors the kubelet's blocking dial: keep trying until the deadline.
        options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=timeout, wait_for_ready=True)
    except grpc.RpcError as error:
        channel.close()
        return f"dial-back to {endpoint} failed: {error.code()}"
    return Plugin(endpoint, channel, stub), options


class StreamWatching:
    """The stream half of the emulator: what it records from each plugin's ListAndWatch."""

    _cond: threading.Condition
    _states: dict[str, ResourceState]
    _plugins: dict[str, Plugin]
    _superseded: dict[str, list[Plugin]]
    disconnects_by_old_streams: int

    def _watch(
        self,
        resource: str,
        plugin: Plugin,
        stream: grpc.CallIterator[api_pb2.ListAndWatchResponse],
    ) -> None:
        """Record every ListAndWatch message until the stream ends; never re-dial."""
        try:
            for response in stream:
                devices = tuple(device_from_message(d) for d in response.devices)
                with self._cond:
                    # Like the kubelet, a superseded connection's messages still count.
                    if plugin not in (self._plugins.get(resource), *self._superseded_of(resource)):
                        return
                    state = self._states[resource]
                    self._states[resource] = replace(
                        state,
                        devices=devices,
                        messages=state.messages + 1,
                        updated_at=time.monotonic(),
                    )
                    self._cond.notify_all()
        except grpc.RpcError:
            pass  # cancelled by us, or the plugin went away: both simply end the stream
        finally:
            self._stream_ended(resource, plugin)

    def _superseded_of(self, resource: str) -> list[Plugin]:
        return self._superseded.get(resource, [])

    def _stream_ended(self, resource: str, plugin: Plugin) -> None:
        """The kubelet's PluginDisconnected: it acts on the *current* client, whichever stream
        ended."""
        with self._cond:
            current = self._plugins.get(resource)
            if plugin in self._superseded_of(resource):
                self._superseded[resource].remove(plugin)
                plugin.channel.close()
                if current is None:
                    return
                self.disconnects_by_old_streams += 1
            elif current is not plugin:
                return
            state = self._states[resource]
            self._states[resource] = replace(
                state, devices=all_unhealthy(state.devices), stream_ended=True
            )
            self._cond.notify_all()
        if current is not plugin and current is not None and current.stream is not None:
            current.stream.cancel()  # type: ignore[no-untyped-call]  # untyped in grpc-stubs
