"""Fake-tree helpers the DRA tests need beyond sysfs_builder: kernel module parameters."""

from __future__ import annotations

from pathlib import Path


def set_module_parameter(root: Path, module: str, name: str, value: str | None) -> None:
    """Write (or, with None, remove) ``sys/module/<module>/parameters/<name>`` as the kernel
    shows a module parameter: its value and a newline."""
    path = root / "sys" / "module" / module / "parameters" / name
    if value is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")
