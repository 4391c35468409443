"""What a `doctor` check returns: rows with a status, a detail and the fixes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"  # worth knowing, keeps no device from a pod
    FAIL = "fail"  # keeps devices from pods
    SKIP = "skip"  # not checked (disabled, or nothing to check)


@dataclass(frozen=True, slots=True)
class Row:
    check: str
    status: Status
    detail: str
    fixes: tuple[str, ...] = ()
