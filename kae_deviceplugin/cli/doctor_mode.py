"""doctor's ``mode`` row: which front end serves this node and why. An explicit mode is the
configuration's; ``mode: auto`` is what the daemon chose at its last start, read from the
choice it records in its state directory (``daemon/mode_state.py``), and the rest of doctor
then checks that mode."""

from __future__ import annotations

from pathlib import Path

from kae_deviceplugin.cli.checks import Row, Status
from kae_deviceplugin.config.settings import Mode
from kae_deviceplugin.daemon.mode_choice import Chosen
from kae_deviceplugin.daemon.mode_state import STATE_FILE, read_choice


def check_mode(mode: Mode, state_dir: Path) -> tuple[list[Row], Chosen]:
    """The row, and the mode the other checks look at (auto with no choice recorded yet: the
    device plugin, what the daemon serves until it has chosen)."""
    if mode != "auto":
        return [Row("mode", Status.OK, f"{mode}: configured")], mode
    recorded = read_choice(state_dir)
    if recorded is None:
        fix = "the daemon records its choice when it starts: is it running on this node?"
        detail = f"auto: no choice recorded in {state_dir / STATE_FILE}"
        return [Row("mode", Status.WARN, detail, (fix,))], "device-plugin"
    last = recorded.last
    detail = f"{last.mode} (auto, {last.reason}): {recorded.detail}"
    return [Row("mode", Status.OK, detail)], last.mode


def recorded_mode(state_dir: Path) -> Chosen:
    """The mode ``mode: auto`` chose at the daemon's last start (the device plugin before it
    chose): what ``list --mode auto`` shows."""
    recorded = read_choice(state_dir)
    return "device-plugin" if recorded is None else recorded.last.mode
