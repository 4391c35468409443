"""The claims this driver prepared, by pool device name: who holds a VF for the VF profiles.

A claim holds its devices from NodePrepareResources on, before any container of its pod runs, so
the kubelet's pod-resources (which lists running pods) is not enough in DRA mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from kae_deviceplugin.dra.api import plugin_dir
from kae_deviceplugin.dra.checkpoint import CheckpointFile

ClaimHolders = Callable[[], Mapping[str, tuple[str, ...]]]


def prepared_claims(kubelet_root: Path) -> ClaimHolders:
    """The claims this driver prepared, by pool device name, read from its checkpoint: a claim
    holds its devices from NodePrepareResources on, before its pod's containers run."""
    file = CheckpointFile(plugin_dir(kubelet_root))

    def claims() -> dict[str, tuple[str, ...]]:
        held: dict[str, list[str]] = {}
        for claim in file.read_only().claims.values():
            for device in claim.devices:
                held.setdefault(device.device, []).append(f"claim {claim.namespace}/{claim.name}")
        return {name: tuple(sorted(who)) for name, who in held.items()}

    return claims
