"""How many sysfs attribute files the incremental scanner may keep open, and where sysfs is mounted.

The budget leaves room for the rest of the daemon (RESERVED_FDS) and bounds the kernel memory the
kept files pin (one page each, see KEPT_BUFFERS_BYTES); RLIMIT_NOFILE's soft limit is raised
toward the hard limit once when the budget is too small.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import resource

log = logging.getLogger(__name__)

# What opening an attribute to keep can give instead of a descriptor.
ABSENT = -2  # the file did not exist when the device was read: costs nothing per tick
BY_PATH = -1  # no descriptor to spare, or it could not be opened: read as scan() does
_OUT_OF_FDS = frozenset({errno.EMFILE, errno.ENFILE})
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC

# Left to the daemon (sockets, gRPC, the udev monitor, files opened while answering Allocate).
RESERVED_FDS = 256
# Where the one raise of the soft limit aims when the hard limit is higher (or unlimited).
SOFT_LIMIT_GOAL = 1 << 16
# An open sysfs attribute keeps a page-sized kernel buffer after its first read, charged to the
# pod's memory cgroup: 4 KiB pages allow 4096 kept files (1365 devices), 64 KiB pages 256.
KEPT_BUFFERS_BYTES = 16 << 20
_MOUNTINFO_ESCAPE = re.compile(r"\\([0-7]{3})")


class FdBudget:
    """How many attribute files may stay open; raises RLIMIT_NOFILE's soft limit once if needed."""

    def __init__(self, max_fds: int | None) -> None:
        self.cap = max_fds  # None: the open-file limit and KEPT_BUFFERS_BYTES bound it
        self.kept = 0
        self.limit: int | None = None  # worked out when first needed in a pass
        self.by_rlimit = False  # the open-file limit is what bounds ``limit``
        self.raised = False
        self.ran_out = False  # an open failed for lack of descriptors in this pass

    def reset(self) -> None:
        """Called with every descriptor closed, before a full pass: look at the limit afresh."""
        self.limit = None
        self.ran_out = False

    def allows_one_more(self) -> bool:
        if self.ran_out:
            return False
        if self.limit is None:
            self.work_out_limit()
        if self.kept >= (self.limit or 0) and self.by_rlimit and not self.raised:
            self.raised = True
            _raise_soft_limit()
            self.work_out_limit()
        return self.kept < (self.limit or 0)

    def out_of_descriptors(self) -> None:
        """EMFILE/ENFILE although within budget: someone else needs them; keep half from now on."""
        self.ran_out = True
        self.cap = self.kept // 2

    def work_out_limit(self) -> None:
        spare = _spare_fds()
        others = KEPT_BUFFERS_BYTES // os.sysconf("SC_PAGE_SIZE")
        if self.cap is not None:
            others = min(others, self.cap)
        self.limit, self.by_rlimit = min(spare, others), spare < others

    def open(self, path: str, *, present: bool) -> int:
        """A descriptor for ``path`` to keep within the budget, else ABSENT or BY_PATH."""
        if not self.allows_one_more():
            return BY_PATH if present else ABSENT
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return ABSENT
        except OSError as err:
            if err.errno not in _OUT_OF_FDS:
                return BY_PATH  # e.g. EACCES: scan() meets it too, so read it as scan() does
            self.out_of_descriptors()
            log.warning(
                "out of file descriptors with %d sysfs files open: keeping at most %d from now on",
                self.kept,
                self.cap,
            )
            return BY_PATH if present else ABSENT
        self.kept += 1
        return fd


def _spare_fds() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return SOFT_LIMIT_GOAL - RESERVED_FDS
    return max(0, soft - RESERVED_FDS)


def _raise_soft_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    goal = SOFT_LIMIT_GOAL if hard == resource.RLIM_INFINITY else min(hard, SOFT_LIMIT_GOAL)
    if soft == resource.RLIM_INFINITY or soft >= goal:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (goal, hard))
    except (ValueError, OSError) as err:
        log.info("cannot raise the open-file limit from %d to %d: %s", soft, goal, err)
        return
    log.info(
        "raised the open-file soft limit from %d to %d to keep sysfs attributes open", soft, goal
    )


def on_sysfs(path: str) -> bool:
    """Whether ``path`` lies on a sysfs mount (by /proc/self/mountinfo; False when unsure)."""
    try:
        real = os.path.realpath(path)
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            lines = mounts.read().splitlines()
    except OSError:
        return False
    best, fstype = -1, ""
    for line in lines:
        fields, sep, rest = line.partition(" - ")
        parts = fields.split()
        if not sep or len(parts) < 5 or not rest.split():
            continue
        point = _MOUNTINFO_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), parts[4])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:  # a later mount on the same point hides earlier ones
            best, fstype = len(point), rest.split()[0]
    return fstype == "sysfs"
