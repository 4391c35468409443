"""Every error the daemon raises on purpose, so callers can tell our refusals from bugs.

::

    KaeDevicePluginError
    ├── InvalidConfig           a file, flag or KAE_DP_* value breaks a rule (every problem listed)
    ├── StartupError            serve cannot start: a path, the cause and the fix, on one line
    ├── AllocationError         an Allocate the plugin refuses, with the gRPC status to answer
    ├── ScanDeferred            discovery cannot look now (out of file descriptors): keep the last
    ├── UnsafeSocketPath        a socket path we must not create, follow or delete
    ├── SocketInUse             another live process serves the socket we were about to create
    ├── SocketVanished          our freshly bound socket was deleted at once (a kubelet's sweep)
    ├── RegistrationFailed      the kubelet answered Register with an error
    ├── CheckpointError         the DRA checkpoint cannot be trusted (its path and why)
    │   ├── CheckpointCorrupt   not what this daemon writes: torn by hand, truncated, checksum
    │   ├── CheckpointTooNew    written by a newer daemon in a format this one does not know
    │   └── CheckpointUnreadable  there, but not readable as a regular file (a symlink, a FIFO, EIO)
    ├── ClaimRefused            a claim the DRA plugin cannot prepare (the reason for the kubelet)
    └── ApiError                the API server refused a call or cannot be reached (its status)
        ├── KubeconfigError     no client: the kubeconfig or service account is unusable (why)
        └── RequestBudgetSpent  not sent: this node's request budget for that kind of call is spent

``ConfigError`` is not an exception: it is one problem inside an ``InvalidConfig``.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final


class KaeDevicePluginError(Exception):
    """Base of every error the daemon raises on purpose.

    ``exit_code`` is what the process exits with when this error ends it (the README's table).
    """

    exit_code: int = 1


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Final = _Missing()  # the value of a ConfigError about a key that is absent or unknown
_REPR = reprlib.Repr()  # user values can be huge or deeply nested: show only their start
_REPR.maxstring = _REPR.maxother = 60


def show(value: object) -> str:
    """A short repr of a user's value: its start only, and never an exception."""
    try:
        return _REPR.repr(value)
    except ValueError:  # an int too long for str() (Python caps it at 4300 digits)
        return f"<{type(value).__name__} too long to show>"


NAME_LIMIT = 200  # characters of a name (a claim's, a pod's, a UID) that a log line shows
TEXT_LIMIT = 1000  # characters of a cause another party wrote (an API server's message)


def clipped(text: str, limit: int = NAME_LIMIT) -> str:
    """``text`` for a log line: whole when short, else its start, an ellipsis and its length,
    so that a name sent to us (a kubelet's claim name, UID) cannot make a line of megabytes."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text)} characters)"


@dataclass(frozen=True, slots=True)
class ConfigError:
    """One problem: where (``engines.hpre.shares`` or a flag name), the offending value, and why."""

    path: str
    value: object
    why: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        got = "" if self.value is MISSING else f" (got {show(self.value)})"
        return f"{where}{self.why}{got}"


class InvalidConfig(KaeDevicePluginError):
    """Every problem found in one file or one set of overrides, one per line."""

    exit_code = 2

    def __init__(self, errors: Iterable[ConfigError], source: str | None = None) -> None:
        self.errors: tuple[ConfigError, ...] = tuple(errors)
        self.source = source
        super().__init__("\n".join(self.lines()))

    @classmethod
    def whole(cls, source: str, why: str) -> InvalidConfig:
        """A problem with the file as a whole rather than with one of its keys."""
        return cls([ConfigError("", MISSING, why)], source)

    def lines(self) -> list[str]:
        prefix = f"{self.source}: " if self.source else ""
        return [f"{prefix}{error}" for error in self.errors]


EXIT_USAGE = 2  # a bad invocation: an option value, a path that does not exist
EXIT_ENVIRONMENT = 3  # the node: a directory or socket the daemon cannot use


class StartupError(KaeDevicePluginError):
    """serve cannot start; the message names the path, the cause and the fix, on one line.

    ``code`` is the process exit code: 2 for a bad invocation, 3 for the environment.
    """

    def __init__(self, message: str, *, code: int = 3) -> None:
        super().__init__(message)
        self.exit_code = code


class AllocationError(KaeDevicePluginError):
    """A request the plugin must refuse; ``code`` is the gRPC status name to answer with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ScanDeferred(KaeDevicePluginError):
    """Discovery could not look at sysfs this time for a reason of our own process (out of file
    descriptors), which says nothing about the node: the last inventory stays in force."""


class UnsafeSocketPath(KaeDevicePluginError):
    """A socket path we must not create, follow or delete."""

    exit_code = 3


class SocketInUse(KaeDevicePluginError):
    """Another live process serves the socket we were about to create."""

    exit_code = 3


class SocketVanished(KaeDevicePluginError):
    """Our freshly bound socket was deleted at once (a kubelet sweeping its directory)."""


class RegistrationFailed(KaeDevicePluginError):
    """The kubelet answered Register with an error."""


class ApiError(KaeDevicePluginError):
    """An API-server call failed: ``status`` is the HTTP status (0 when none was reached).

    ``verb`` and ``resource`` (``list``, ``resourceslices``) say what was asked, where the client
    knows it: a 404 means "no such object" for a get and "no such API" for a list. ``details``
    is the Status object's ``details`` where the answer had one: a 404 for an object that does
    not exist names it there (``name``, ``group``, ``kind``: the resource's plural), one for an
    API the server does not serve names nothing.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        verb: str = "",
        resource: str = "",
        details: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason  # the Status object's reason: NotFound, Conflict, AlreadyExists...
        self.verb = verb
        self.resource = resource
        self.details = details


UNREACHABLE = "Unreachable"  # ApiError.reason where no answer came (status 0): no connection


class KubeconfigError(ApiError):
    """No API client can be made: the kubeconfig (or the pod's service account) is missing or
    unusable; the message names the file and what is wrong with it.

    ``exit_code``: 2 where the invocation named a file that is none (a bad value), 3 where the
    node lacks what it needs (a file it cannot read, no service account token).
    """

    def __init__(self, message: str, *, code: int = 3) -> None:
        super().__init__(message)
        self.exit_code = code


class RequestBudgetSpent(ApiError):
    """A request this node did not send: its lane of the token bucket already has as many
    requests queued as may wait (``apiserver.paced``); the caller asks again later."""


def cause(err: BaseException) -> str:
    """An exception as the one-line cause of a refusal, never empty: ``str(TimeoutError())``
    is "", which once answered the kubelet with an empty error."""
    if isinstance(err, TimeoutError) and not str(err):
        return "no answer in time (timed out)"
    return str(err) or type(err).__name__


class CheckpointError(KaeDevicePluginError):
    """The DRA checkpoint cannot be trusted; the message names its path and why.

    Refusing, rather than starting empty, keeps the record of prepared claims: an empty start
    would answer every later Unprepare with success and leave their CDI specs behind.
    """

    exit_code = 3


class CheckpointCorrupt(CheckpointError):
    """The checkpoint is not what this daemon writes (unparseable, wrong shape, bad checksum)."""


class CheckpointTooNew(CheckpointError):
    """The checkpoint carries a version this daemon does not know (written by a newer one)."""


class CheckpointUnreadable(CheckpointError):
    """The checkpoint (or the directory it lives in) is there but cannot be read as a regular
    file: a symlink, a FIFO or a directory in its place, a permission or an I/O error. Only an
    absent file is an empty checkpoint; anything else read as empty would forget every claim."""


class ClaimRefused(KaeDevicePluginError):
    """A ResourceClaim the DRA plugin cannot prepare; the message goes to the kubelet."""
