"""Hotplug from udev: a ``uacce`` uevent makes the daemon rescan now rather than at the next tick.

Events only trigger a rescan; the rescan itself reads sysfs and decides what changed, so a lost or
duplicated event costs nothing but latency (the periodic full pass stays the safety net). While
the monitor works the scan loop's ticks leave to it what only changes with a uevent (devices
added and removed, /dev nodes, driver links); once it fails they look at those again. Where no
uevent socket can be opened (no netlink permission, no netlink in a sandbox) the task says so
once and ends. The socket and its two formats are ``daemon/uevents.py``'s.

Which netlink group: udevd re-broadcasts events on the "udev" group after its rules ran, but
without a running udevd nobody sends there, so then the raw "kernel" group is used. Nothing here
depends on udev rules: the kernel creates the attributes and the devtmpfs node before it sends
the event. (A pod outside the host network namespace only sees kernel events, so a deployment
that mounts ``/run/udev`` there should pass ``source="kernel"``.)
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.counters import Counters
from kae_deviceplugin.daemon.uevents import open_netlink_monitor
from kae_deviceplugin.discovery.fd_budget import on_sysfs

log = logging.getLogger(__name__)

SUBSYSTEM = "uacce"
# Actions that can change what a rescan finds. bind/unbind belong to the parent PCI function and
# are listed for completeness; the uacce device's own add/remove follows them anyway.
RESCAN_ACTIONS = frozenset({"add", "remove", "change", "bind", "unbind", "move"})
UDEV_CONTROL = Path("/run/udev/control")  # exists while udevd runs (libudev checks the same)
MAX_EVENTS_PER_WAKEUP = 256  # a flood is drained in slices so it cannot starve the event loop
MAX_CONSECUTIVE_ERRORS = 8  # a monitor failing this often in a row is given up on


class Coverable(Protocol):
    """What uevents may take off the scanner's hands (``IncrementalScanner``)."""

    def uevents_cover_links(self, covered: bool) -> None: ...


class ScanTarget(Protocol):
    """What the task reads and wakes (a ``scanloop.ScanLoop``)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def counters(self) -> Counters: ...
    @property
    def rescan_now(self) -> asyncio.Event: ...
    @property
    def scanner(self) -> Coverable: ...


class UeventDevice(Protocol):
    """The part of a ``uevents.Uevent`` used here."""

    @property
    def action(self) -> str | None: ...

    @property
    def sys_name(self) -> str: ...


class UeventMonitor(Protocol):
    """The part of ``uevents.NetlinkMonitor`` used here; ``poll()`` must never block."""

    def fileno(self) -> int: ...

    def poll(self) -> UeventDevice | None: ...

    def close(self) -> None: ...


MonitorFactory = Callable[[], UeventMonitor]


def netlink_source(udev_control: Path = UDEV_CONTROL) -> str:
    """``"udev"`` when udevd runs, else ``"kernel"`` (a "udev" monitor would hear nothing)."""
    return "udev" if udev_control.exists() else "kernel"


def open_uacce_monitor(source: str | None = None) -> UeventMonitor:
    """A non-blocking uevent socket for the ``uacce`` subsystem.

    Raises OSError without netlink permission (ValueError for an unknown source); ``udev_task``
    turns that into the fallback.
    """
    return open_netlink_monitor(source or netlink_source(), SUBSYSTEM)


class _Drainer:
    """The reader callback: reads every pending event and asks for a rescan."""

    def __init__(
        self, monitor: UeventMonitor, rescan_now: asyncio.Event, counters: Counters
    ) -> None:
        self.monitor = monitor
        self.rescan_now = rescan_now
        self.counters = counters
        self.errors = 0
        self.broken = asyncio.Event()
        self.last_error: BaseException | None = None
        for action in sorted(RESCAN_ACTIONS):  # every counted action, at 0 from the start
            counters.udev_events.labels(action)

    def __call__(self) -> None:
        for _ in range(MAX_EVENTS_PER_WAKEUP):
            try:
                device = self.monitor.poll()
            except Exception as err:  # a reader callback's exception would only be logged, forever
                self.failed(err)
                return
            self.errors = 0
            if device is None:
                return
            self.handle(device)

    def handle(self, device: UeventDevice) -> None:
        action = device.action or ""
        if action not in RESCAN_ACTIONS:
            log.debug("ignoring uevent %r for %s", action, device.sys_name)
            return
        log.info("uevent %s %s: rescanning", action, device.sys_name)
        self.counters.udev_events.labels(action).inc()
        self.rescan_now.set()  # already set during a burst: the burst costs one rescan

    def failed(self, err: BaseException) -> None:
        # ENOBUFS means the socket overflowed and events were lost: a rescan recovers them.
        self.rescan_now.set()
        self.errors += 1
        self.last_error = err
        if self.errors == 1:
            log.debug("reading the udev monitor failed: %s", err)
        if self.errors >= MAX_CONSECUTIVE_ERRORS:
            self.broken.set()


def kernel_sysfs(sysfs_root: Path) -> bool:
    """Whether the kernel's uevents, all a udev monitor hears, are about the tree at
    ``sysfs_root``: the kernel's own sysfs, at /sys or mounted elsewhere. A fixture tree (a test
    cluster's, through the chart's ``devicePlugin.fixtureRoot`` or a host process) is not: its
    devices come and go with no uevent, so the scan loop's ticks must keep looking at them."""
    return os.path.realpath(sysfs_root) == "/sys" or on_sysfs(str(sysfs_root))


async def udev_task(
    daemon: ScanTarget,
    open_monitor: MonitorFactory = open_uacce_monitor,
    describes: Callable[[Path], bool] = kernel_sysfs,
) -> None:
    """Root task: set ``daemon.rescan_now`` on every uacce uevent. Never raises for missing udev.
    ``describes``: whether the monitor's events are about the daemon's sysfs tree."""
    loop = asyncio.get_running_loop()
    try:
        monitor = open_monitor()
    except Exception as err:  # udev is optional: any failure to set it up means "no hotplug"
        _fall_back(daemon, f"cannot open a udev monitor ({err})")
        return
    try:
        fd = monitor.fileno()
        drainer = _Drainer(monitor, daemon.rescan_now, daemon.counters)
        loop.add_reader(fd, drainer)
    except Exception as err:
        monitor.close()
        _fall_back(daemon, f"cannot watch the udev monitor ({err})")
        return
    log.info("watching udev for %s hotplug (netlink fd %d)", SUBSYSTEM, fd)
    # Devices coming and going, /dev nodes and driver (un)binding now arrive as uevents: the
    # scan loop's ticks stop looking at them (they keep reading what changes without one).
    covered = describes(daemon.settings.sysfs_root)
    if not covered:
        log.info(
            "%s is not the kernel's sysfs, which uevents describe: every tick looks at its "
            "devices, /dev nodes and driver links",
            daemon.settings.sysfs_root,
        )
    daemon.scanner.uevents_cover_links(covered)
    try:
        await drainer.broken.wait()
    finally:
        daemon.scanner.uevents_cover_links(False)
        loop.remove_reader(fd)
        monitor.close()  # the task owns the socket it opened
    _fall_back(daemon, f"the udev monitor keeps failing ({drainer.last_error})")


def _fall_back(daemon: ScanTarget, why: str) -> None:
    log.warning(
        "%s: hotplug falls back to the periodic rescan every %g s",
        why,
        daemon.settings.scan_interval,
    )
