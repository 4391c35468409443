"""Kubernetes device plugin for the Kunpeng Acceleration Engine (KAE)."""

import os
from importlib.metadata import PackageNotFoundError, version

# gRPC's C core logs connection chatter (GOAWAY on every kubelet restart) at INFO to stderr,
# outside Python logging; errors are all an operator needs from it. Set before grpc loads.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

try:
    __version__ = version("kae-deviceplugin")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
