"""The daemon's own exceptions, so callers can tell our refusals from bugs."""

from __future__ import annotations


class KaeDevicePluginError(Exception):
    """Base of every error the daemon raises on purpose."""


class UnsafeSocketPath(KaeDevicePluginError):
    """A socket path we must not create, follow or delete."""


class SocketInUse(KaeDevicePluginError):
    """Another live process serves the socket we were about to create."""


class SocketVanished(KaeDevicePluginError):
    """Our freshly bound socket was deleted at once (a kubelet sweeping its directory)."""


class RegistrationFailed(KaeDevicePluginError):
    """The kubelet answered Register with an error."""
