"""Uevents from a netlink socket of our own: the two wire formats, who may send them, reading.

A ``NETLINK_KOBJECT_UEVENT`` socket hears one of two multicast groups. Group 1 carries the
kernel's own messages, ``ACTION@DEVPATH`` then ``KEY=VALUE`` strings, each ending in a NUL.
Group 2 carries udevd's re-broadcast after its rules ran, in libudev's format: a header that
starts with ``libudev\\0`` and the magic 0xfeedcafe in network order, then the properties (the
same ``KEY=VALUE\\0`` strings) at the offset and length the header gives in host order.

Reading them here rather than through libudev keeps ctypes, libudev and its wrapper out of the
daemon (about 1.5 MiB resident) for what is, to the daemon, only a "rescan now" signal. Like
libudev, only messages from the kernel or from root are believed: the kernel's group must come
from port 0, and every message must carry the sender's credentials with uid 0. Anyone may send a
unicast message to our socket, so those are never believed (without the check, any local user
could keep the daemon rescanning). The subsystem is matched in user space, as libudev does for
kernel messages; udevd's are at rest as rare as the kernel's.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

NETLINK_KOBJECT_UEVENT = 15
GROUPS = {"kernel": 1, "udev": 2}
UDEV_PREFIX = b"libudev\0"
UDEV_MAGIC = 0xFEEDCAFE
# After the prefix and the magic: the header's size, the properties' offset and length.
_UDEV_SIZES = struct.Struct("=III")
_UDEV_FIXED = len(UDEV_PREFIX) + 4 + _UDEV_SIZES.size
_UCRED = struct.Struct("=iII")  # pid, uid, gid
# The kernel's uevents fit in 2 KiB of properties, udevd's in a few; a longer message is cut,
# flagged MSG_TRUNC and dropped.
RECEIVE_BYTES = 16 * 1024
MAX_READS_PER_POLL = 256  # a flood of other subsystems' events is read in bounded slices

Trusted = Callable[[Any, list[tuple[int, int, bytes]]], bool]


class Uevent(NamedTuple):
    """One parsed uevent; ``properties`` has every ``KEY=VALUE`` it carried."""

    action: str
    devpath: str
    subsystem: str
    properties: dict[str, str]

    @property
    def sys_name(self) -> str:
        """The device's name, the last part of its path (as pyudev's ``Device.sys_name``)."""
        return self.devpath.rsplit("/", 1)[-1]


def parse_uevent(data: bytes) -> Uevent | None:
    """The uevent in one message of either format, or None for a malformed one."""
    if data.startswith(UDEV_PREFIX):
        body = _udev_properties(data)
        heading = None
    else:
        heading, _, body = data.partition(b"\0")
        if b"@/" not in heading:
            return None
    if body is None:
        return None
    properties = _properties(body)
    action = properties.get("ACTION")
    devpath = properties.get("DEVPATH")
    if heading is not None and (action is None or devpath is None):
        named_action, _, named_path = heading.decode(errors="replace").partition("@")
        action, devpath = action or named_action, devpath or named_path
    if not action or not devpath:
        return None
    return Uevent(action, devpath, properties.get("SUBSYSTEM", ""), properties)


def _udev_properties(data: bytes) -> bytes | None:
    if len(data) < _UDEV_FIXED:
        return None
    if int.from_bytes(data[8:12], "big") != UDEV_MAGIC:
        return None  # another libudev's format: nothing in it can be trusted
    header_size, offset, length = _UDEV_SIZES.unpack_from(data, 12)
    if header_size < _UDEV_FIXED or offset < _UDEV_FIXED or offset + length > len(data):
        return None
    return data[offset : offset + length]


def _properties(body: bytes) -> dict[str, str]:
    properties: dict[str, str] = {}
    for entry in body.split(b"\0"):
        key, equals, value = entry.decode(errors="replace").partition("=")
        if equals and key:
            properties[key] = value
    return properties


def from_root_or_kernel(address: Any, ancillary: list[tuple[int, int, bytes]]) -> bool:
    """libudev's rule: multicast (never unicast), the kernel's group only from the kernel (port
    0), and the sender's credentials saying uid 0."""
    if not isinstance(address, tuple) or len(address) != 2:
        return False
    port, groups = address
    if groups == 0 or (groups == GROUPS["kernel"] and port != 0):
        return False
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            if len(data) < _UCRED.size:
                return False
            uid: int = _UCRED.unpack_from(data)[1]
            return uid == 0
    return False


class NetlinkMonitor:
    """A non-blocking uevent socket; ``poll()`` returns the next believed event of one subsystem.

    ``trusted`` decides from the sender's address and credentials (tests hand a socket pair and
    their own rule); ``max_reads`` bounds the messages one ``poll()`` reads.
    """

    def __init__(
        self,
        sock: socket.socket,
        subsystem: str,
        trusted: Trusted = from_root_or_kernel,
        max_reads: int = MAX_READS_PER_POLL,
    ) -> None:
        self.sock = sock
        self.subsystem = subsystem
        self.trusted = trusted
        self.max_reads = max_reads

    def fileno(self) -> int:
        return self.sock.fileno()

    def poll(self) -> Uevent | None:
        """The next pending event of the subsystem; None once nothing is pending, or after
        ``max_reads`` messages of others (the caller is woken again while more wait).
        Never blocks; raises OSError from the socket (ENOBUFS: events were lost)."""
        space = socket.CMSG_SPACE(_UCRED.size)
        for _ in range(self.max_reads):
            try:
                data, ancillary, flags, address = self.sock.recvmsg(RECEIVE_BYTES, space)
            except BlockingIOError:
                return None
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                log.debug("dropped a cut uevent (%d bytes)", len(data))
                continue
            if not self.trusted(address, ancillary):
                log.debug("dropped a uevent from an untrusted sender %r", address)
                continue
            event = parse_uevent(data)
            if event is None:
                log.debug("dropped a malformed uevent (%d bytes)", len(data))
            elif event.subsystem == self.subsystem:
                return event
        return None

    def close(self) -> None:
        self.sock.close()


def open_netlink_monitor(source: str, subsystem: str) -> NetlinkMonitor:
    """A uevent socket bound to ``source``'s group ("kernel" or "udev"), non-blocking.

    Raises ValueError for another source and OSError where netlink is refused (no permission,
    no such protocol in this kernel or sandbox).
    """
    if source not in GROUPS:
        raise ValueError(f"unknown uevent source {source!r}: one of {sorted(GROUPS)}")
    kind = socket.SOCK_RAW | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
    sock = socket.socket(socket.AF_NETLINK, kind, NETLINK_KOBJECT_UEVENT)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # for the uid check
        sock.bind((0, GROUPS[source]))  # port 0: the kernel picks a free one
    except BaseException:
        sock.close()
        raise
    return NetlinkMonitor(sock, subsystem)
