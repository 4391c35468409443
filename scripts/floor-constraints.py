#!/usr/bin/env python3
"""Print a pip constraints file pinning every runtime dependency of pyproject.toml at its floor.

.ci/run installs the test extra under these constraints into a second venv and runs the unit
suite there, so a lower bound the code does not really work with fails CI. Every runtime
dependency must have a ``>=`` floor; one without is an error (it would float to the newest).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
FLOOR = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)$")


def floors(requirements: list[str]) -> list[str]:
    """``name==floor`` for each requirement; ValueError naming one without a ``>=`` floor."""
    pins = []
    for requirement in requirements:
        match = FLOOR.match(requirement.split(";")[0])
        if match is None:
            raise ValueError(f"cannot read the requirement {requirement!r}")
        name, spec = match.groups()
        lower = [part.strip()[2:].strip() for part in spec.split(",") if ">=" in part]
        if len(lower) != 1:
            raise ValueError(f"{name}: a runtime dependency needs exactly one >= floor")
        pins.append(f"{name}=={lower[0]}")
    return pins


def main() -> int:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    try:
        pins = floors(project["dependencies"])
    except ValueError as err:
        sys.stderr.write(f"floor-constraints: {err}\n")
        return 2
    sys.stdout.write("".join(f"{pin}\n" for pin in pins))
    return 0


if __name__ == "__main__":
    sys.exit(main())
