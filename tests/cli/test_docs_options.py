"""Every ``--option`` the README and the docs name exists, or belongs to another named tool."""

from __future__ import annotations

import re
from pathlib import Path

import click

from kae_deviceplugin.cli.main import main

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/configuration.md", "docs/architecture.md")
# Options of other programs the docs show, each with the tool it belongs to.
OTHER_TOOLS = {
    "--check": "scripts/render-config-reference.py, sysfs_fixtures/generate.py",
    "--create-namespace": "helm",
    "--namespace": "helm",
    "--set": "helm",
    "--isolation": "buildah",
    "--only": "benchmarks/run.py",
    "--quick": "benchmarks/run.py",
    "--root-dir": "the kubelet",
    "--strict": "mypy",
}
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")


def our_options() -> set[str]:
    """Every long option of every kae-deviceplugin command."""
    ctx = click.Context(main)
    options = {"--version", "--help"}
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        assert command is not None
        for param in command.params:
            options.update(o for o in param.opts if o.startswith("--"))
    return options


def test_every_option_the_docs_name_exists() -> None:
    """A renamed or removed option fails here until the docs say the same."""
    ours = our_options()
    named = {m[0]: doc for doc in DOCS for m in OPTION.finditer((REPO / doc).read_text())}
    unknown = {option: doc for option, doc in named.items() if option not in ours}
    assert set(unknown) <= set(OTHER_TOOLS), f"options the code does not have: {unknown}"
