"""The kubelet's plugin watcher, emulated: it registers a plugin when its socket is *created*.

Written from the kubelet's contract (pluginmanager): a socket appearing in ``plugins_registry``
(or found there when the watcher starts) is asked GetInfo; a ``DevicePlugin`` that supports
``v1beta1`` is handed to the device manager as if it had called Register, with the endpoint it
named, and told the outcome through NotifyRegistrationStatus. Nothing else registers a plugin
again: a plugin whose stream ended is left alone until its socket is created anew.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from pathlib import Path

import grpc

from kae_deviceplugin._generated.deviceplugin.v1beta1 import api_pb2
from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2 as reg_pb
from kae_deviceplugin._generated.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from kae_deviceplugin.kubelet.dial import OWN_CONNECTION, unix_target
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator

SCAN_EVERY = 0.02  # the real watcher uses fsnotify; a short poll gives the same "on creation"
CALL_TIMEOUT = 5.0


class PluginWatcherEmulator:
    """Watches ``registry`` and registers each newly created socket with ``kubelet``."""

    def __init__(
        self, kubelet: KubeletEmulator, registry: Path, *, dial_delay: float = 0.0
    ) -> None:
        """``dial_delay``: report the registration at once and dial the plugin (Register,
        then its ListAndWatch stream) only that many seconds later, as the real kubelet does
        when its first dial of a plugin fails and gRPC retries after its 1 s backoff (seen)."""
        self.kubelet = kubelet
        self.registry = Path(registry)
        self.dial_delay = dial_delay
        self.registered: list[str] = []  # resource names, one entry per registration
        self._seen: dict[str, tuple[int, int]] = {}  # socket name -> (inode, ctime) registered
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start watching; sockets already there count as created (as at a kubelet's start)."""
        self.registry.mkdir(parents=True, exist_ok=True)
        self._seen.clear()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="plugin-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def __enter__(self) -> PluginWatcherEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(SCAN_EVERY):
            for name, identity in _sockets(self.registry).items():
                if self._seen.get(name) != identity:
                    self._seen[name] = identity
                    self._register(self.registry / name)

    def _register(self, socket_path: Path) -> None:
        with grpc.insecure_channel(unix_target(socket_path), options=[OWN_CONNECTION]) as channel:
            stub = reg_grpc.RegistrationStub(channel)
            try:
                info = stub.GetInfo(reg_pb.InfoRequest(), timeout=CALL_TIMEOUT)
            except grpc.RpcError:
                return  # not a plugin (or gone already): the real watcher skips it too
            if info.type != "DevicePlugin" or "v1beta1" not in info.supported_versions:
                why = f"unsupported plugin {info.type} {list(info.supported_versions)}"
                self._notify(stub, why)
                return
            request = api_pb2.RegisterRequest(
                version="v1beta1", endpoint=info.endpoint, resource_name=info.name
            )
            if self.dial_delay:
                self._notify(stub, None)
                time.sleep(self.dial_delay)  # the emulated kubelet's retry backoff, not a wait
                if self.kubelet.register(request, via_watcher=True) is None:
                    self.registered.append(info.name)
                return
            problem = self.kubelet.register(request, via_watcher=True)
            if problem is None:
                self.registered.append(info.name)
            self._notify(stub, problem)

    @staticmethod
    def _notify(stub: reg_grpc.RegistrationStub, problem: str | None) -> None:
        status = reg_pb.RegistrationStatus(plugin_registered=problem is None, error=problem or "")
        with contextlib.suppress(grpc.RpcError):  # the plugin went away meanwhile
            stub.NotifyRegistrationStatus(status, timeout=CALL_TIMEOUT)


def _sockets(directory: Path) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return found
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISSOCK(st.st_mode):
            found[entry.name] = (st.st_ino, st.st_ctime_ns)
    return found
