"""The options the docs give a repository script are the script's: for every
``python benchmarks/x.py [--a N] [--b]`` or ``scripts/y.sh --c`` a document shows, each option
is in that script's ``--help`` (Python) or its usage text (shell)."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache

from tests.docs.markdown import CURRENT_DOCS, REPO, read

# A script of the repository and what follows it to the end of its code span or line.
INVOCATION = re.compile(r"((?:benchmarks|scripts|sysfs_fixtures|proto)/[\w./-]+)([^\n`]*)")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


@cache
def script_options(script: str) -> frozenset[str]:
    """Every option the script knows: its ``--help`` for Python; for a shell script the
    patterns of its ``case`` over the arguments (``--arch)``, ``-h | --help)``)."""
    path = REPO / script
    if path.suffix == ".py":
        out = subprocess.run(
            [sys.executable, str(path), "--help"],
            capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
        )  # fmt: skip
        assert out.returncode == 0, f"{script} --help: {out.stderr}"
        return frozenset(OPTION.findall(out.stdout))
    patterns = re.findall(r"^\s*([-a-z| ]+)\)", path.read_text(errors="replace"), re.M)
    return frozenset(o for pattern in patterns for o in OPTION.findall(pattern))


def invocations(text: str) -> dict[str, set[str]]:
    """Script -> the options the document gives it."""
    found: dict[str, set[str]] = {}
    for script, rest in INVOCATION.findall(text):
        if (REPO / script).is_file():  # a shell comment after it is prose
            found.setdefault(script, set()).update(OPTION.findall(rest.split(" #")[0]))
    return found


def unknown_options(text: str) -> list[str]:
    return [
        f"{script} {option}"
        for script, options in sorted(invocations(text).items())
        if options  # a script named without options (or a module it imports) is not run
        for option in sorted(options - script_options(script) - {"--help"})
    ]


def test_every_script_option_the_docs_show_exists() -> None:
    """A script's option renamed or removed fails here until the docs follow."""
    unknown = [f"{doc}: {u}" for doc in CURRENT_DOCS for u in unknown_options(read(doc))]
    assert not unknown, "options the scripts do not have:\n" + "\n".join(unknown)


def test_the_script_option_check_can_fail() -> None:
    """An option a script lacks is caught, in a usage line and in a code span."""
    text = (
        "    python benchmarks/run.py [--quick] [--repeats N] [--json FILE]\n"
        "`scripts/build-image.sh --arch arm64 --platform x`\n"
    )
    assert unknown_options(text) == [
        "benchmarks/run.py --repeats",
        "scripts/build-image.sh --platform",
    ]
