"""Kubernetes device plugin for the Kunpeng Acceleration Engine (KAE)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kae-deviceplugin")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
