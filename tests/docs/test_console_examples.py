"""The ``kae-deviceplugin`` sessions the docs show on a bundled fixture print what they show:
each ``console`` block whose command reads only ``sysfs_fixtures/`` is run from the repository
root, and every line shown (``...`` stands for lines left out) is in the output, in order.

(The ``kubectl kae`` blocks are the plugin's output on the tests' cluster:
tests/kubectl/test_readme.py.)"""

from __future__ import annotations

import shlex
import subprocess
import sys

from tests.docs.markdown import CURRENT_DOCS, REPO, fenced_blocks, read

PROMPT = "$ kae-deviceplugin "


def sessions(text: str) -> list[tuple[list[str], list[str]]]:
    """Each console block run on a fixture: its arguments and the lines it shows."""
    found = []
    for info, body in fenced_blocks(text):
        lines = body.splitlines()
        if info != "console" or not lines or not lines[0].startswith(PROMPT):
            continue
        args = shlex.split(lines[0].removeprefix(PROMPT))
        paths = [a for a in args if "/" in a]
        if paths and all(a.startswith("sysfs_fixtures/") for a in paths):
            found.append((args, lines[1:]))
    return found


def unseen(shown: list[str], output: str) -> list[str]:
    """The shown lines the output lacks, in order (a shown line must come after the last
    one found); ``...`` matches any lines."""
    printed = [line.rstrip() for line in output.splitlines()]
    missing, at = [], 0
    for line in (s.rstrip() for s in shown if s.strip() != "..."):
        try:
            at = printed.index(line, at) + 1
        except ValueError:
            missing.append(line)
    return missing


def run(args: list[str]) -> str:
    # The metrics address empty: doctor must not find a daemon of the machine's.
    env_free = ["--metrics-address", ""] if args[0] == "doctor" else []
    out = subprocess.run(
        [sys.executable, "-m", "kae_deviceplugin", *args, *env_free],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    return out.stdout


def test_fixture_sessions_print_what_the_docs_show() -> None:
    """A changed column, message or fix fails here until the docs show the new output."""
    problems = []
    for doc in CURRENT_DOCS:
        for args, shown in sessions(read(doc)):
            if missing := unseen(shown, run(args)):
                problems.append(
                    f"{doc}: kae-deviceplugin {' '.join(args)} does not print {missing}"
                )
    assert not problems, "\n".join(problems)


def test_the_session_check_can_fail() -> None:
    """Lines out of order, or changed, are reported; ``...`` skips any number of lines."""
    output = "a\nb\nc\nd\n"
    assert unseen(["a", "...", "d"], output) == []
    assert unseen(["b", "a"], output) == ["a"]
    assert unseen(["a", "c  x"], output) == ["c  x"]
    text = "```console\n$ kae-deviceplugin list --sysfs-root /sys\nx\n```\n"
    assert sessions(text) == []  # the host's sysfs: not run
