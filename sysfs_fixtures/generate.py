"""(Re)write the named fake sysfs trees next to this script, check them, or build a large one.

Usage:
  python sysfs_fixtures/generate.py                    rewrite every tree in TREES
  python sysfs_fixtures/generate.py --check            exit 1 naming what differs from a rebuild
  python sysfs_fixtures/generate.py --large N --out D  build N devices into the new directory D

The trees are built by kae_deviceplugin.testing.sysfs_trees; see README.md here for what each holds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from kae_deviceplugin.testing.sysfs_builder import build_tree
from kae_deviceplugin.testing.sysfs_trees import TREES, large_tree

FIXTURES = Path(__file__).resolve().parent
# Git keeps no empty directory, so each one the builder leaves empty gets this marker file.
KEEP = ".gitkeep"

# Path (relative to a tree) -> ("dir", "") | ("link", target) | ("file", contents).
Entry = tuple[str, str]


def write_tree(name: str, dest: Path) -> None:
    """Build the named tree into ``dest`` (which must not exist) in the checked-in form."""
    dest.mkdir(parents=True)
    TREES[name].build(dest)
    for dirpath, dirnames, filenames in os.walk(dest):
        if not dirnames and not filenames:
            (Path(dirpath) / KEEP).touch()


def snapshot(root: Path) -> dict[str, Entry]:
    """Every path under ``root`` with what it is; symlinks are recorded, never followed."""
    entries: dict[str, Entry] = {}
    pending = [root]
    while pending:
        with os.scandir(pending.pop()) as scan:
            for entry in scan:
                rel = Path(entry.path).relative_to(root).as_posix()
                if entry.is_symlink():
                    entries[rel] = ("link", os.readlink(entry.path))
                elif entry.is_dir():
                    entries[rel] = ("dir", "")
                    pending.append(Path(entry.path))
                else:
                    entries[rel] = ("file", Path(entry.path).read_bytes().decode(errors="replace"))
    return entries


def differences(expected: Path, actual: Path) -> list[str]:
    """Human-readable differences between two trees, sorted by path."""
    want, have = snapshot(expected), snapshot(actual)
    problems = []
    for rel in sorted(want.keys() | have.keys()):
        if rel not in have:
            problems.append(f"missing: {rel}")
        elif rel not in want:
            problems.append(f"unexpected: {rel}")
        elif want[rel] != have[rel]:
            problems.append(f"differs: {rel}: expected {want[rel]!r}, found {have[rel]!r}")
    return problems


def check(fixtures: Path) -> list[str]:
    """Differences between the trees in ``fixtures`` and a fresh build of every named tree."""
    problems = [
        f"unexpected tree: {path.name}"
        for path in sorted(fixtures.iterdir())
        if path.is_dir() and path.name not in TREES and not path.name.startswith((".", "_"))
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(TREES):
            fresh = Path(tmp) / name
            write_tree(name, fresh)
            if not (fixtures / name).is_dir():
                problems.append(f"missing tree: {name}")
                continue
            problems.extend(f"{name}: {p}" for p in differences(fresh, fixtures / name))
    return problems


def regenerate(fixtures: Path) -> None:
    """Replace every named tree in ``fixtures`` with a fresh build."""
    for name in sorted(TREES):
        dest = fixtures / name
        if dest.exists():
            shutil.rmtree(dest)
        write_tree(name, dest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--dir", type=Path, default=FIXTURES, help="where the trees live")
    parser.add_argument("--large", type=int, metavar="N", help="build a tree of N devices")
    parser.add_argument("--out", type=Path, help="new directory for --large")
    args = parser.parse_args(argv)
    if args.large is not None:
        if args.out is None or args.check:
            parser.error("--large needs --out and excludes --check")
        if args.large < 0:
            parser.error("--large must not be negative")
        if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
            parser.error(f"{args.out} is not empty")
        build_tree(args.out, large_tree(args.large))
        return 0
    if args.check:
        problems = check(args.dir)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print(f"{len(problems)} difference(s); run: python {sys.argv[0]}", file=sys.stderr)
        return 1 if problems else 0
    regenerate(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
