"""The uevent socket of our own: both wire formats, malformed messages, who is believed, reading.

Formats are built here from their documented layout (the kernel's ``ACTION@DEVPATH`` message;
libudev's header). Reading runs on real sockets: a Unix datagram pair standing in for netlink
(with a rule of the test's own for the sender), and a real netlink socket where the kernel lets
this process make one, for the rule that drops unicast messages.
"""

from __future__ import annotations

import select
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from kae_deviceplugin.daemon import uevents
from kae_deviceplugin.daemon.uevents import (
    NetlinkMonitor,
    Uevent,
    from_root_or_kernel,
    open_netlink_monitor,
    parse_uevent,
)

DEADLINE = 5.0
DEVPATH = "/devices/pci0000:74/0000:74:00.0/0000:75:00.0/uacce/hisi_zip-4"


def kernel_message(action: str = "add", devpath: str = DEVPATH, subsystem: str = "uacce") -> bytes:
    """A message as the kernel sends it on group 1."""
    fields = [f"{action}@{devpath}", f"ACTION={action}", f"DEVPATH={devpath}"]
    fields += [f"SUBSYSTEM={subsystem}", "SEQNUM=7", "MAJOR=241", "MINOR=4"]
    return "\0".join(fields).encode() + b"\0"


def udev_message(
    action: str = "add",
    devpath: str = DEVPATH,
    subsystem: str = "uacce",
    magic: int = 0xFEEDCAFE,
    header_size: int = 40,
) -> bytes:
    """A message in libudev's format as udevd sends it on group 2: the 40-byte header (prefix,
    magic in network order, sizes in host order, then four filter words), then the properties."""
    body = f"ACTION={action}\0DEVPATH={devpath}\0SUBSYSTEM={subsystem}\0SEQNUM=8\0".encode()
    header = b"libudev\0" + magic.to_bytes(4, "big")
    header += struct.pack("=III", header_size, 40, len(body)) + bytes(16)
    return header + body


def credentials(uid: int, pid: int = 0) -> list[tuple[int, int, bytes]]:
    return [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, struct.pack("=iII", pid, uid, uid))]


@pytest.mark.parametrize("make", [kernel_message, udev_message], ids=["kernel", "udev"])
def test_both_formats_parse_to_the_same_event(make: Any) -> None:
    event = parse_uevent(make("remove"))
    assert event is not None
    assert (event.action, event.devpath, event.subsystem) == ("remove", DEVPATH, "uacce")
    assert event.sys_name == "hisi_zip-4"
    assert event.properties["ACTION"] == "remove"


def test_a_kernel_message_without_the_keys_takes_them_from_its_heading() -> None:
    event = parse_uevent(f"change@{DEVPATH}\0SUBSYSTEM=uacce\0".encode())
    assert event == Uevent("change", DEVPATH, "uacce", {"SUBSYSTEM": "uacce"})


def test_odd_entries_are_skipped_and_bad_bytes_replaced() -> None:
    message = kernel_message() + b"NOEQUALS\0=novalue\0\0NAME=\xff\xfe\0"
    event = parse_uevent(message)
    assert event is not None
    assert "NOEQUALS" not in event.properties and "" not in event.properties
    assert event.properties["NAME"] == "\ufffd\ufffd"


def _cut_header(message: bytes) -> bytes:
    return message[:20]


def _beyond_the_end(message: bytes) -> bytes:
    return message[:16] + struct.pack("=I", len(message)) + message[20:]


MALFORMED = {
    "empty": b"",
    "no heading": b"ACTION=add\0DEVPATH=/devices/x\0SUBSYSTEM=uacce\0",
    "heading without a path": b"add@\0SUBSYSTEM=uacce\0",
    "no action anywhere": f"@{DEVPATH}\0SUBSYSTEM=uacce\0".encode(),
    "udev header cut": _cut_header(udev_message()),
    "udev wrong magic": udev_message(magic=0xCAFEFEED),
    "udev header too small": udev_message(header_size=8),
    "udev properties beyond the end": _beyond_the_end(udev_message()),
    "udev without an action": udev_message(action=""),
}


@pytest.mark.parametrize("message", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_messages_give_none(message: bytes) -> None:
    assert parse_uevent(message) is None


SENDERS = {
    "kernel, kernel group": ((0, 1), credentials(0), True),
    "udevd, udev group": ((812, 2), credentials(0, pid=812), True),
    "a process on the kernel group": ((812, 1), credentials(0, pid=812), False),
    "unicast": ((0, 0), credentials(0), False),
    "not root": ((812, 2), credentials(1000, pid=812), False),
    "no credentials": ((0, 1), [], False),
    "cut credentials": ((0, 1), [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, b"\0" * 4)], False),
    "no netlink address": (None, credentials(0), False),
}


@pytest.mark.parametrize(("address", "ancillary", "believed"), SENDERS.values(), ids=SENDERS.keys())
def test_only_the_kernel_and_root_are_believed(
    address: Any, ancillary: list[tuple[int, int, bytes]], believed: bool
) -> None:
    assert from_root_or_kernel(address, ancillary) is believed


def anyone(address: Any, ancillary: list[tuple[int, int, bytes]]) -> bool:
    """The socket pair's sender has no netlink address; its credentials are still real."""
    del address
    return bool(ancillary)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    reader, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    reader.setblocking(False)
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    yield reader, writer
    reader.close()
    writer.close()


def readable(sock: socket.socket, timeout: float) -> bool:
    return bool(select.select([sock], [], [], timeout)[0])


def test_poll_returns_the_subsystems_events_and_skips_the_rest(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    reader, writer = pair
    monitor = NetlinkMonitor(reader, "uacce", anyone)
    for message in [
        kernel_message(subsystem="block"),
        b"garbage",
        kernel_message("add"),
        udev_message("remove", subsystem="net"),
        udev_message("remove"),
    ]:
        writer.send(message)
    first, second = monitor.poll(), monitor.poll()
    assert first is not None and first.action == "add"
    assert second is not None and second.action == "remove"
    assert monitor.poll() is None, "nothing is pending: None, never a block"
    assert not readable(reader, 0)


def test_untrusted_and_cut_messages_are_dropped(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    reader, writer = pair
    monitor = NetlinkMonitor(reader, "uacce", lambda address, ancillary: False)
    writer.send(kernel_message())
    assert monitor.poll() is None and not readable(reader, 0)
    monitor.trusted = anyone
    writer.send(kernel_message("change") + b"X=" + b"y" * uevents.RECEIVE_BYTES + b"\0")
    writer.send(kernel_message("remove"))
    event = monitor.poll()
    assert event is not None and event.action == "remove"


def test_a_flood_of_other_events_is_read_in_bounded_slices(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """Each poll reads at most ``max_reads`` messages, so the event loop gets its turn; the event
    behind the flood still comes out after a few wake-ups."""
    reader, writer = pair
    monitor = NetlinkMonitor(reader, "uacce", anyone, max_reads=8)
    for i in range(20):
        writer.send(kernel_message(devpath=f"/devices/virtual/block/loop{i}", subsystem="block"))
    writer.send(kernel_message("add"))
    polls: list[Uevent | None] = []
    while not polls or polls[-1] is None:
        assert readable(reader, DEADLINE), "the event behind the flood was lost"
        polls.append(monitor.poll())
    assert polls[:-1] == [None, None]  # 8 + 8 of the flood, then 4 more and the event
    assert polls[-1] is not None and polls[-1].action == "add"


def _netlink_or_skip(source: str) -> uevents.NetlinkMonitor:
    try:
        return open_netlink_monitor(source, "uacce")
    except OSError as err:  # a sandbox without netlink: the unit tests above still ran
        pytest.skip(f"no uevent netlink socket here: {err}")


@pytest.mark.parametrize(("source", "group"), [("kernel", 1), ("udev", 2)])
def test_the_real_socket_joins_its_sources_group(source: str, group: int) -> None:
    monitor = _netlink_or_skip(source)
    try:
        assert monitor.sock.getsockname()[1] == group
        assert monitor.sock.getblocking() is False  # poll() may never block the event loop
    finally:
        monitor.close()
    assert monitor.sock.fileno() == -1


def test_an_unknown_source_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown uevent source 'both'"):
        open_netlink_monitor("both", "uacce")


def test_a_real_unicast_message_is_not_believed() -> None:
    """A process that sends straight to the monitor's port is not the kernel nor udevd: the same
    well-formed message is read by a socket that believes anyone and dropped by the real rule."""
    monitor = _netlink_or_skip("kernel")
    believer = NetlinkMonitor(_netlink_or_skip("kernel").sock, "uacce", anyone)
    sender = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, uevents.NETLINK_KOBJECT_UEVENT)
    try:
        for target in (monitor, believer):
            try:
                sender.sendto(kernel_message("add"), (target.sock.getsockname()[0], 0))
            except PermissionError as err:  # unicast needs CAP_NET_ADMIN
                pytest.skip(f"cannot send on netlink here: {err}")
        assert readable(believer.sock, DEADLINE)
        assert (event := _next_uacce(believer)) is not None and event.action == "add"
        assert readable(monitor.sock, DEADLINE)
        assert monitor.poll() is None
    finally:
        for sock in (sender, monitor.sock, believer.sock):
            sock.close()


def _next_uacce(monitor: NetlinkMonitor) -> Uevent | None:
    """The believer may also hear the host's own uevents; only ours is of uacce here."""
    while (event := monitor.poll()) is None and readable(monitor.sock, DEADLINE):
        pass
    return event
