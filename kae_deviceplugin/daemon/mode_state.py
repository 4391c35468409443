"""The last ``mode: auto`` choice of this node, kept in the state directory between starts.

One small JSON file, ``mode-choice.json``: the mode, the reason's code, the one-line detail and
when the facts behind it were read. The next start damps flapping with it (``mode_choice``),
tells a change of mode (the Node's Event), and ``doctor`` reads it to say which mode the daemon
chose and why. Written atomically (readers see the old file or the new); a file that is
missing, unreadable or not ours reads as no previous choice, which only means no damping.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kae_deviceplugin.container import safe_fs
from kae_deviceplugin.daemon.mode_choice import Choice, Chosen, Last

log = logging.getLogger(__name__)

STATE_FILE: Final = "mode-choice.json"
_MODES: Final[tuple[Chosen, ...]] = ("device-plugin", "dra")


@dataclass(frozen=True, slots=True)
class Recorded:
    """The file's content: the choice as the last start made it."""

    last: Last
    detail: str


def read_choice(state_dir: Path) -> Recorded | None:
    """The recorded choice; None when there is none (or it cannot be read: then nothing is
    damped, which is the safe side)."""
    try:
        with safe_fs.open_root(state_dir, create=False) as fd:
            data = safe_fs.read_file(fd, STATE_FILE)
    except OSError:
        return None
    if data is None:
        return None
    try:
        found = json.loads(data)
        mode, reason, at = found["mode"], str(found["reason"]), float(found["at"])
        detail = str(found.get("detail", ""))
    except (ValueError, KeyError, TypeError):
        log.warning("ignoring %s: not a mode choice this daemon wrote", state_dir / STATE_FILE)
        return None
    if mode not in _MODES:
        return None
    return Recorded(Last(mode, reason, at), detail)


def write_choice(state_dir: Path, choice: Choice) -> None:
    """Record ``choice``; a failure is logged, not fatal (the next start only damps less)."""
    record = {
        "mode": choice.mode,
        "reason": choice.reason.code,
        "detail": choice.detail,
        "at": choice.decided_at,
    }
    try:
        with safe_fs.open_root(state_dir) as fd:
            safe_fs.write_file(fd, STATE_FILE, (json.dumps(record) + "\n").encode(), mode=0o644)
    except OSError as err:
        log.warning("cannot record the mode choice in %s: %s", state_dir / STATE_FILE, err)
