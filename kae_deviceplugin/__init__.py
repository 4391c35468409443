"""Kubernetes device plugin for the Kunpeng Acceleration Engine (KAE)."""

import os

# gRPC's C core logs connection chatter (GOAWAY on every kubelet restart) at INFO to stderr,
# outside Python logging; errors are all an operator needs from it. Set before grpc loads.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

# The single source of the version (pyproject.toml reads it from here). A literal, not
# importlib.metadata: that import alone costs 30 ms and ~1 MiB at every start.
__version__ = "0.1.0"

__all__ = ["__version__"]
