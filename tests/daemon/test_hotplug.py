"""udev_task against a fake monitor: what an event does, bursts, failures, fallback, cleanup.

The fake has a real file descriptor (a socketpair), so the task's ``loop.add_reader`` wiring is
exercised for real; only the netlink socket is left out (tests/daemon/test_uevents.py reads one,
tests/daemon/test_hotplug_umockdev.py covers the whole path).
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.daemon import hotplug
from kae_deviceplugin.daemon.hotplug import (
    UeventDevice,
    UeventMonitor,
    kernel_sysfs,
    netlink_source,
    udev_task,
)
from kae_deviceplugin.daemon.run import DevicePluginDaemon, build_daemon

DEADLINE = 5.0


@dataclass(frozen=True)
class FakeDevice:
    action: str | None
    sys_name: str


class FakeMonitor:
    """Queued events behind a readable socket, like a netlink socket with messages waiting."""

    def __init__(self) -> None:
        self.reader, self.writer = socket.socketpair()
        self.reader.setblocking(False)
        self.queue: collections.deque[FakeDevice | BaseException] = collections.deque()
        self.polls = 0

    def push(self, *items: FakeDevice | BaseException) -> None:
        for item in items:
            self.queue.append(item)
            self.writer.send(b"x")

    def fileno(self) -> int:
        return self.reader.fileno()

    def poll(self) -> UeventDevice | None:
        self.polls += 1
        if not self.queue:
            return None
        self.reader.recv(1)
        item = self.queue.popleft()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self.reader.close()
        self.writer.close()

    @property
    def closed(self) -> bool:
        return self.reader.fileno() == -1


class BrokenMonitor(FakeMonitor):
    """Readable for ever, failing every read: a monitor whose socket went bad."""

    def poll(self) -> UeventDevice | None:
        self.polls += 1
        raise OSError(errno.EBADF, "bad file descriptor")


class UnwatchableMonitor(FakeMonitor):
    """Opened, but with a descriptor the event loop refuses."""

    def fileno(self) -> int:
        return -1


def make_daemon(tmp_path: Path, scan_interval: float = 60.0) -> DevicePluginDaemon:
    return build_daemon(
        Settings(kubelet_root=tmp_path / "kubelet", scan_interval=scan_interval),
        with_optional=False,
    )


def udev_count(daemon: DevicePluginDaemon, action: str) -> float:
    """How many uevents of ``action`` the daemon counted."""
    return daemon.counters.sample("kae_udev_events_total", {"action": action})


async def until(condition: Callable[[], bool], what: str) -> None:
    """Let the loop run until ``condition`` holds, failing after DEADLINE seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


async def rescan_requested(daemon: DevicePluginDaemon) -> None:
    await asyncio.wait_for(daemon.scan.rescan_now.wait(), DEADLINE)


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel the task and check that it ends by cancellation, not by an error of its own."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def AS_KERNELS(root: Path) -> bool:
    """The fake monitor's events describe the test's tree, as the kernel's describe /sys."""
    del root
    return True


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(coro_fn(), 4 * DEADLINE))


def test_event_requests_rescan_counts_and_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each add/change/remove sets rescan_now, bumps the per-action counter, logs one INFO line;
    while the monitor works the scanner's ticks leave entries, /dev nodes and links to it."""
    caplog.set_level(logging.INFO, logger="kae_deviceplugin.daemon.hotplug")
    monitor = FakeMonitor()
    daemon = make_daemon(tmp_path)

    async def main() -> None:
        assert not daemon.scan.scanner.links_by_uevents
        task = asyncio.create_task(udev_task(daemon.scan, lambda: monitor, AS_KERNELS))
        await until(lambda: daemon.scan.scanner.links_by_uevents, "ticks leaving links to uevents")
        for action in ("add", "change", "remove"):
            before = udev_count(daemon, action)
            daemon.scan.rescan_now.clear()
            monitor.push(FakeDevice(action, "hisi_zip-4"))
            await rescan_requested(daemon)
            assert udev_count(daemon, action) == before + 1
            assert f"uevent {action} hisi_zip-4" in caplog.text
        assert not task.done()
        await stop(task)

    run(main)
    monitor.close()


def test_burst_is_drained_in_one_wakeup(tmp_path: Path) -> None:
    """A burst of pending events is read completely at the first wake-up; the rescan is one flag."""
    monitor = FakeMonitor()
    daemon = make_daemon(tmp_path)
    names = [f"hisi_sec2-{i}" for i in range(40)]
    monitor.push(*(FakeDevice("add", name) for name in names))
    before = udev_count(daemon, "add")

    async def main() -> None:
        task = asyncio.create_task(udev_task(daemon.scan, lambda: monitor, AS_KERNELS))
        await rescan_requested(daemon)
        # The callback that set the flag ran to the end of the queue before returning.
        assert not monitor.queue
        assert udev_count(daemon, "add") == before + len(names)
        await stop(task)

    run(main)
    monitor.close()


def test_irrelevant_actions_do_not_rescan(tmp_path: Path) -> None:
    """Actions that cannot change the inventory (online, offline, none) are ignored."""
    monitor = FakeMonitor()
    daemon = make_daemon(tmp_path)

    async def main() -> None:
        task = asyncio.create_task(udev_task(daemon.scan, lambda: monitor, AS_KERNELS))
        monitor.push(FakeDevice("online", "hisi_zip-4"), FakeDevice(None, "hisi_zip-4"))
        await until(lambda: not monitor.queue, "the ignored events to be read")
        assert not daemon.scan.rescan_now.is_set()
        assert udev_count(daemon, "online") == 0
        monitor.push(FakeDevice("unbind", "hisi_zip-4"))
        await rescan_requested(daemon)
        await stop(task)

    run(main)
    monitor.close()


@pytest.mark.parametrize(
    "error",
    [
        PermissionError(errno.EPERM, "Operation not permitted"),
        OSError(errno.EPROTONOSUPPORT, "Protocol not supported"),
        OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol"),
        ValueError("unknown uevent source 'x'"),
    ],
    ids=["no-netlink-permission", "no-netlink", "no-netlink-family", "bad-source"],
)
def test_unavailable_udev_warns_once_and_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    """Without udev: one warning naming the rescan interval, then the task ends, never raising
    (an optional root task that returns has just finished: the supervisor keeps the rest)."""
    caplog.set_level(logging.INFO, logger="kae_deviceplugin.daemon.hotplug")
    daemon = make_daemon(tmp_path, scan_interval=7.5)

    def failing() -> UeventMonitor:
        raise error

    async def main() -> None:
        await asyncio.wait_for(udev_task(daemon.scan, failing), DEADLINE)  # returns, no raise

    run(main)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, caplog.text
    message = warnings[0].getMessage()
    assert "periodic rescan every 7.5 s" in message
    assert str(error) in message
    assert not daemon.scan.rescan_now.is_set()


def test_cancellation_removes_the_reader_and_closes_the_monitor(tmp_path: Path) -> None:
    """When the daemon stops, the task's fd is no longer watched by the loop, and the socket the
    task opened is closed."""
    monitor = FakeMonitor()
    fd = monitor.fileno()
    daemon = make_daemon(tmp_path)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(udev_task(daemon.scan, lambda: monitor, AS_KERNELS))
        monitor.push(FakeDevice("add", "hisi_hpre-2"))
        await rescan_requested(daemon)  # the reader is installed
        assert not monitor.closed
        await stop(task)
        assert monitor.closed
        assert loop.remove_reader(fd) is False

    run(main)
    monitor.close()


def test_a_read_error_still_rescans_and_keeps_watching(tmp_path: Path) -> None:
    """ENOBUFS (events lost to a full socket) asks for a rescan; later events still arrive."""
    monitor = FakeMonitor()
    daemon = make_daemon(tmp_path)

    async def main() -> None:
        task = asyncio.create_task(udev_task(daemon.scan, lambda: monitor, AS_KERNELS))
        monitor.push(OSError(errno.ENOBUFS, "No buffer space available"))
        await rescan_requested(daemon)
        daemon.scan.rescan_now.clear()
        monitor.push(FakeDevice("remove", "hisi_zip-5"))
        await rescan_requested(daemon)
        assert not task.done()
        await stop(task)

    run(main)
    monitor.close()


def test_a_monitor_that_keeps_failing_is_given_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A persistently failing monitor is dropped with one warning: no busy loop, no crash."""
    caplog.set_level(logging.INFO, logger="kae_deviceplugin.daemon.hotplug")
    monitor = BrokenMonitor()
    monitor.push(FakeDevice("add", "x"))  # makes the fd readable for good: nothing reads it
    fd = monitor.fileno()
    daemon = make_daemon(tmp_path, scan_interval=2.0)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        # It ends by itself (returns, does not raise) once it gives up.
        await asyncio.wait_for(udev_task(daemon.scan, lambda: monitor, AS_KERNELS), DEADLINE)
        assert "keeps failing" in caplog.text
        polls = monitor.polls
        for _ in range(3):
            await asyncio.sleep(0)
        assert monitor.polls == polls == hotplug.MAX_CONSECUTIVE_ERRORS
        assert loop.remove_reader(fd) is False
        assert monitor.closed
        assert not daemon.scan.scanner.links_by_uevents, "ticks must look at the links again"

    run(main)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "periodic rescan every 2 s" in warnings[0]
    monitor.close()


def test_a_monitor_that_cannot_be_watched_is_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Opened, but its fd refused by the loop: the socket is closed, one warning, the task ends."""
    caplog.set_level(logging.INFO, logger="kae_deviceplugin.daemon.hotplug")
    monitor = UnwatchableMonitor()
    daemon = make_daemon(tmp_path)

    async def main() -> None:
        await asyncio.wait_for(udev_task(daemon.scan, lambda: monitor, AS_KERNELS), DEADLINE)

    run(main)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "cannot watch the udev monitor" in warnings[0], warnings
    assert monitor.closed, "the task must close what it opened"
    assert not daemon.scan.scanner.links_by_uevents


def test_netlink_source_follows_udevd(tmp_path: Path) -> None:
    """The "udev" group is used only while udevd runs; otherwise the kernel's own events."""
    control = tmp_path / "control"
    assert netlink_source(control) == "kernel"
    control.touch()
    assert netlink_source(control) == "udev"


def test_uevents_describe_only_the_kernels_sysfs(tmp_path: Path) -> None:
    """The kernel's sysfs counts (at /sys); a fixture tree does not, so with a working monitor
    the daemon serving one keeps its ticks looking at devices, /dev nodes and links."""
    assert kernel_sysfs(Path("/sys"))
    assert not kernel_sysfs(tmp_path / "sys")
    monitor = FakeMonitor()
    daemon = build_daemon(
        Settings(kubelet_root=tmp_path / "kubelet", sysfs_root=tmp_path / "sys", scan_interval=60),
        with_optional=False,
    )

    async def main() -> None:
        task = asyncio.create_task(udev_task(daemon.scan, lambda: monitor))
        try:
            monitor.push(FakeDevice("add", "hisi_zip-4"))
            await rescan_requested(daemon)  # the monitor is read: the task has set up
            assert not daemon.scan.scanner.links_by_uevents
        finally:
            await stop(task)

    run(main)
    monitor.close()
