"""The serving policy the DRA tests hand to the prepare core: the device plugin's own class.

Its one import names the module that holds ServingPolicy today (issue 19 moves it to
container/serving.py); change it here only.
"""

from __future__ import annotations

from pathlib import Path

from kae_deviceplugin.container.edits import ContainerOptions
from kae_deviceplugin.container.serving import ServingPolicy


def serving_policy(root: Path, *, view_problem: str | None = None) -> ServingPolicy:
    """A policy for a fixture tree under ``root``: sysfs view on, UADK NUMA hints on."""
    options = ContainerOptions(
        sysfs_root=root / "sys",
        dev_root=root / "dev",
        state_dir=root / "state",
        uadk_numa_hint=True,
        view_problem=view_problem,
    )
    return ServingPolicy(container=options)
