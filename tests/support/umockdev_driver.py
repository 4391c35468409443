"""Scenarios that must run under ``umockdev-wrapper``; each prints one JSON object on stdout.

    umockdev-wrapper python -m tests.umockdev_driver events [--source auto|kernel|udev]
    umockdev-wrapper python -m tests.umockdev_driver latency [--count N]
    umockdev-wrapper python -m tests.umockdev_driver daemon [--count N]

The wrapper preloads libumockdev-preload, which redirects ``/sys`` and ``/dev`` to the testbed's
temporary root and carries the testbed's synthetic uevents to netlink monitors opened after the
testbed exists: it turns a ``NETLINK_KOBJECT_UEVENT`` socket into a Unix datagram socket and
sends it each event in libudev's format, whatever group was asked for, with the sender made to
look like udevd's group with uid 0. So the daemon's own socket (``daemon/uevents.py``) hears them
as it would udevd's on a node, and its sender check passes. The testbed's C library is driven
through ctypes (no PyGObject to build), and its files are written by
``kae_deviceplugin.testing.sysfs_builder``, so the daemon scans the same Kunpeng-shaped tree
through the real ``/sys`` path that it scans on a node.

tests/daemon/test_hotplug_umockdev.py runs these and asserts on the JSON; benchmarks can reuse them.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import dataclasses
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.core.engines import engine_for_uacce_name
from kae_deviceplugin.daemon.hotplug import RESCAN_ACTIONS, open_uacce_monitor, udev_task
from kae_deviceplugin.daemon.run import DevicePluginDaemon, build_daemon
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_builder import (
    DeviceSpec,
    add_device,
    find_uacce_dir,
    remove_device,
)
from kae_deviceplugin.testing.sysfs_trees import kunpeng_pf

LIBRARY = "libumockdev.so.0"
DEADLINE = 5.0  # per awaited step; a lost event fails the step instead of hanging the run
LONG_SCAN_INTERVAL = 60.0  # so that only a udev event can explain a fast update


class Testbed:
    """A UMockdevTestbed through ctypes. Create it before anything opens a udev monitor."""

    def __init__(self) -> None:
        if "libumockdev-preload" not in os.environ.get("LD_PRELOAD", ""):
            raise RuntimeError("run this under umockdev-wrapper")
        lib = ctypes.CDLL(LIBRARY)
        glib = ctypes.CDLL("libglib-2.0.so.0")
        gobject = ctypes.CDLL("libgobject-2.0.so.0")
        lib.umockdev_testbed_new.restype = ctypes.c_void_p
        lib.umockdev_testbed_new.argtypes = []
        # Returns a newly allocated string (freed below), hence c_void_p rather than c_char_p.
        lib.umockdev_testbed_get_root_dir.restype = ctypes.c_void_p
        lib.umockdev_testbed_get_root_dir.argtypes = [ctypes.c_void_p]
        lib.umockdev_testbed_uevent.restype = None
        lib.umockdev_testbed_uevent.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
        glib.g_free.argtypes = [ctypes.c_void_p]
        glib.g_free.restype = None
        gobject.g_object_unref.argtypes = [ctypes.c_void_p]
        gobject.g_object_unref.restype = None
        self._lib, self._gobject = lib, gobject
        self._testbed: int | None = lib.umockdev_testbed_new()
        raw = lib.umockdev_testbed_get_root_dir(self._testbed)
        self.root = Path(ctypes.string_at(raw).decode())
        glib.g_free(raw)

    def add(self, spec: DeviceSpec) -> str:
        """Write the device's files (as the kernel does before announcing it); its devpath."""
        add_device(self.root, spec)
        return "/" + str(find_uacce_dir(self.root, spec.name).relative_to(self.root))

    def uevent(self, devpath: str, action: str) -> None:
        self._lib.umockdev_testbed_uevent(self._testbed, devpath.encode(), action.encode())

    def unplug(self, devpath: str) -> None:
        """Send "remove", then delete the files (the sender reads them to build the event)."""
        self.uevent(devpath, "remove")
        remove_device(self.root, Path(devpath).name)

    def close(self) -> None:
        """Destroy the testbed: its directory goes and UMOCKDEV_DIR is unset."""
        if self._testbed is not None:
            self._gobject.g_object_unref(self._testbed)
            self._testbed = None


ZIP_4 = kunpeng_pf("hisi_zip", 0, 4)
ZIP_5 = kunpeng_pf("hisi_zip", 1, 5)
SEC_0 = kunpeng_pf("hisi_sec2", 0, 0)


def daemon_settings(workdir: Path, **changes: Any) -> Settings:
    base = Settings(
        sysfs_root=Path("/sys"),  # redirected into the testbed by the preload
        dev_root=Path("/dev"),
        kubelet_root=workdir / "kubelet",
        state_dir=workdir / "state",
        scan_interval=LONG_SCAN_INTERVAL,
        registration="kubelet-socket",
        metrics_address="",
        nfd_features_file=None,
    )
    return dataclasses.replace(base, **changes)


def udev_counts(daemon: DevicePluginDaemon) -> dict[str, float]:
    def count(action: str) -> float:
        return daemon.counters.sample("kae_udev_events_total", {"action": action})

    return {action: count(action) for action in sorted(RESCAN_ACTIONS)}


class LogLines(logging.Handler):
    """Keeps the hotplug module's log lines for the report."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


async def timed_rescan(daemon: DevicePluginDaemon, emit: Callable[[], None]) -> float | None:
    """Seconds from ``emit()`` (which sends one uevent) to rescan_now being set; None if never."""
    daemon.scan.rescan_now.clear()
    started = time.perf_counter()
    emit()
    try:
        await asyncio.wait_for(daemon.scan.rescan_now.wait(), DEADLINE)
    except TimeoutError:
        return None
    return time.perf_counter() - started


async def events(source: str, count: int) -> dict[str, Any]:
    """udev_task alone (its real netlink monitor): does each testbed uevent set rescan_now?

    ``count`` > 0 then adds and removes one device that many times and reports the latencies.
    """
    testbed = Testbed()
    handler = LogLines()
    logging.getLogger("kae_deviceplugin.daemon.hotplug").addHandler(handler)
    with tempfile.TemporaryDirectory(prefix="kae", dir="/tmp") as tmp:
        daemon = build_daemon(daemon_settings(Path(tmp)), with_optional=False)
        factory = open_uacce_monitor if source == "auto" else partial(open_uacce_monitor, source)
        task = asyncio.create_task(udev_task(daemon.scan, factory))
        await asyncio.sleep(0)  # one step: the task opens its monitor and installs the reader
        before = udev_counts(daemon)
        steps: list[dict[str, Any]] = []
        devpath = testbed.add(ZIP_4)
        for action, emit in [
            ("add", partial(testbed.uevent, devpath, "add")),
            ("change", partial(testbed.uevent, devpath, "change")),
            ("remove", partial(testbed.unplug, devpath)),
        ]:
            latency = await timed_rescan(daemon, emit)
            steps.append({"action": action, "rescan": latency is not None, "latency": latency})
        latencies: list[float | None] = []
        for i in range(count):
            if i % 2 == 0:
                devpath = testbed.add(ZIP_4)
                emit = partial(testbed.uevent, devpath, "add")
            else:
                emit = partial(testbed.unplug, devpath)
            latencies.append(await timed_rescan(daemon, emit))
            if latencies[-1] is None:
                break  # lost: one deadline is enough to tell
        still_running = not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    after = udev_counts(daemon)
    testbed.close()
    return {
        "steps": steps,
        "task_running": still_running,
        "counted": {k: after[k] - before[k] for k in after if after[k] != before[k]},
        "log": handler.lines,
        **_summary(latencies),
    }


async def daemon_run(count: int) -> dict[str, Any]:
    """The whole daemon (scan every 60 s) with udev_task, against the kubelet emulator.

    A new resource's device reaching the kubelet, then ``count`` add/remove cycles of a second
    device of that resource, each timed from the uevent to the ListAndWatch message showing it.
    """
    testbed = Testbed()
    testbed.add(SEC_0)  # present at start: the daemon registers before any event
    with tempfile.TemporaryDirectory(prefix="kae", dir="/tmp") as tmp:
        settings = daemon_settings(Path(tmp))
        kubelet = KubeletEmulator(settings.effective_device_plugin_dir, dial_timeout=5.0)
        kubelet.start()
        daemon = build_daemon(
            settings, extra_tasks=[lambda d: udev_task(d.scan)], with_optional=False
        )
        running = asyncio.create_task(daemon.run())
        try:
            report = await _drive_daemon(testbed, kubelet, count)
        finally:
            daemon.request_stop()
            exit_code = await asyncio.wait_for(running, DEADLINE)
            kubelet.stop()
    testbed.close()
    return {**report, "exit_code": exit_code}


async def _drive_daemon(testbed: Testbed, kubelet: KubeletEmulator, count: int) -> dict[str, Any]:
    sec, zip_ = _resource(SEC_0), _resource(ZIP_4)

    async def seen(resource: str, ids: set[str]) -> float | None:
        """monotonic() of the first ListAndWatch message of ``resource`` listing exactly ``ids``."""

        def check(k: KubeletEmulator) -> bool:
            state = k.state(resource)
            return state is not None and {d.id for d in state.devices} == ids

        if not await asyncio.to_thread(kubelet.wait_for, check, DEADLINE):
            return None
        state = kubelet.state(resource)
        return None if state is None else state.updated_at

    registered = await seen(sec, {SEC_0.pci_address})
    # A new resource: the udev event makes the daemon start a server that registers.
    devpath = testbed.add(ZIP_4)
    started = time.monotonic()
    testbed.uevent(devpath, "add")
    at = await seen(zip_, {ZIP_4.pci_address})
    new_resource = None if at is None else at - started
    latencies: list[float | None] = []
    both, one = {ZIP_4.pci_address, ZIP_5.pci_address}, {ZIP_4.pci_address}
    for i in range(count if new_resource is not None else 0):
        if i % 2 == 0:
            devpath = testbed.add(ZIP_5)
            started = time.monotonic()
            testbed.uevent(devpath, "add")
            at = await seen(zip_, both)
        else:
            started = time.monotonic()
            testbed.unplug(devpath)
            at = await seen(zip_, one)
        latencies.append(None if at is None else at - started)
        if at is None:
            break
    return {
        "registered": registered is not None,
        "new_resource_latency": new_resource,
        **_summary(latencies),
    }


def _resource(spec: DeviceSpec) -> str:
    engine = engine_for_uacce_name(spec.name)
    assert engine is not None
    return engine.resource


def _summary(latencies: list[float | None]) -> dict[str, Any]:
    delivered = [x for x in latencies if x is not None]
    return {
        "latencies": latencies,
        "lost": len(latencies) - len(delivered),
        "median": statistics.median(delivered) if delivered else None,
        "max": max(delivered) if delivered else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("scenario", choices=["events", "latency", "daemon"])
    parser.add_argument("--source", choices=["auto", "kernel", "udev"], default="auto")
    parser.add_argument("--count", type=int, default=20)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    if args.scenario == "daemon":
        result = asyncio.run(daemon_run(args.count))
    else:
        count = args.count if args.scenario == "latency" else 0
        result = asyncio.run(events(args.source, count))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
