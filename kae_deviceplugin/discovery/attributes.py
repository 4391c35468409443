"""Reading sysfs without ever raising: attribute files, integers, link chains, both layouts."""

from __future__ import annotations

import errno
import os
import re
import stat

PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

MAX_ATTR_BYTES = 65536
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
# Bound once: a full scan calls them tens of thousands of times.
_open, _read, _close = os.open, os.read, os.close
_normpath = os.path.normpath


class _Unreadable:
    """Marks an attribute file that exists but could not be read or decoded."""


UNREADABLE = _Unreadable()
Reading = str | _Unreadable | None  # None: the file does not exist


def read_attribute(path: str) -> Reading:
    """Read a sysfs attribute as stripped text without ever raising.

    Written flat (no try/finally, no helper call): a full scan reads seven of these a device.
    """
    try:
        fd = _open(path, _READ_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return UNREADABLE
    try:
        data = _read(fd, MAX_ATTR_BYTES)
    except OSError:
        _close(fd)
        return UNREADABLE
    _close(fd)
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        return UNREADABLE


def decode_attribute(data: bytes) -> Reading:
    """An attribute's bytes as stripped text, UNREADABLE when they are not ASCII."""
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        return UNREADABLE


def parse_int(reading: Reading) -> int | None:
    """An integer attribute (decimal, or 0x-prefixed hex as PCI attributes are), else None."""
    if not isinstance(reading, str) or not reading:
        return None
    try:
        if reading.isdigit():  # the usual case ("0", "12"): skip the hex check
            return int(reading)
        return int(reading, 0) if reading.lower().startswith(("0x", "-0x")) else int(reading, 10)
    except ValueError:  # not a number, or over Python's 4300 decimal digits: no reading
        return None


def text(reading: Reading) -> str | None:
    return reading if isinstance(reading, str) and reading else None


NOIOMMU_API_SUFFIX = "_noiommu"
# The uacce ``flags`` bits. Mainline (5.7+) and openEuler's 5.10+ kernels: bit 0 is SVA (129 =
# SVA + IOMMU, 128 IOMMU alone, 2 no IOMMU on openEuler). The openEuler 4.19 / KAE 1.x uacce
# (its attributes under ``attrs/``) numbered them otherwise: bit 0 NOIOMMU, bit 1 PASID, bit 2
# FAULT_FROM_DEV, SVA being both of the last two, 0 a shared domain (no PASID).
_SVA = 0x1
_OLD_NOIOMMU, _OLD_SVA = 0x1, 0x6


def sva_of(flags: int | None, api: str | None, old_layout: bool) -> bool | None:
    """Whether a uacce device runs with SVA: its ``flags`` as its kernel family numbers them,
    and never when its ``api`` ends in ``_noiommu`` (UADK's own no-SVA test). None: unknown."""
    if api is not None and api.endswith(NOIOMMU_API_SUFFIX):
        return False
    if flags is None:
        return None
    if old_layout:
        return flags & _OLD_SVA == _OLD_SVA and not flags & _OLD_NOIOMMU
    return bool(flags & _SVA)


_MAX_LINK_HOPS = 8


def _walk(path: str) -> tuple[str | None, bool]:
    """Follow ``path``'s link chain lexically: where it ends and whether that is a directory;
    (None, False) for a dangling link or a loop."""
    current = path
    for _ in range(_MAX_LINK_HOPS):
        try:
            target = os.readlink(current)
        except OSError as err:  # EINVAL: not a link (only ``path`` itself can be that)
            return (current, False) if err.errno == errno.EINVAL else (None, False)
        current = _normpath(f"{current.rpartition('/')[0]}/{target}")
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            return None, False
        if not stat.S_ISLNK(mode):
            return current, stat.S_ISDIR(mode)
    return None, False  # a loop, or a chain no kernel makes


def resolve_dir(path: str) -> str | None:
    """The directory ``path`` leads to, or None for a dangling link, a loop or a non-directory.

    sysfs links point straight at real directories under /sys/devices, so following the link
    chain lexically is exact there and several times cheaper than realpath's per-component
    lstat: a class entry costs one ``readlink`` and one ``lstat`` of its target. realpath
    remains the fallback for trees that put links in the middle of a path.
    """
    current, is_dir = _walk(path)
    if current is None or is_dir:
        return current
    if current == path:  # not a link at all
        return path if os.path.isdir(path) else None
    try:
        real = os.path.realpath(path, strict=True)
    except OSError:
        return None
    return real if os.path.isdir(real) else None


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


class AttributeReader:
    """Reads a class device's attributes, whichever layout the kernel used.

    openEuler 4.19 / KAE 1.x kernels put every attribute under ``attrs/``; everything newer puts
    them directly in the device directory.
    """

    def __init__(self, uacce_dir: str) -> None:
        attrs_dir = f"{uacce_dir}/attrs"
        flat = os.path.exists(f"{uacce_dir}/api") or not os.path.isdir(attrs_dir)
        self.base = uacce_dir if flat else attrs_dir

    @classmethod
    def with_api(cls, uacce_dir: str) -> tuple[AttributeReader, Reading]:
        """The reader and the ``api`` reading, the layout told by that read itself (a scan
        reads ``api`` anyway: this spares the ``stat`` that ``__init__`` makes). ``api``
        reads None exactly when ``exists()`` would say it is absent."""
        reader = cls.__new__(cls)
        api = read_attribute(f"{uacce_dir}/api")
        reader.base = uacce_dir
        if api is None and os.path.isdir(f"{uacce_dir}/attrs"):
            reader.base = f"{uacce_dir}/attrs"
            api = read_attribute(f"{reader.base}/api")
        return reader, api

    def __call__(self, attribute: str) -> Reading:
        return read_attribute(f"{self.base}/{attribute}")
