"""The README's `kubectl kae` section: its examples are the plugin's output on the tests'
cluster, and its ClusterRole grants every request the plugin makes, and only reads."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from tests.kubectl.cluster import HPRE_CLASS, REPO, exactly, kubectl_kae, selector
from tests.kubectl.test_why import SM2, pending_with
from tests.support.http_apiserver import HttpApiServer


def plugin_section() -> str:
    text = (REPO / "README.md").read_text()
    found = re.search(r"^## `kubectl kae`.*?(?=^## )", text, re.S | re.M)
    assert found is not None, "README has no kubectl kae section"
    return found.group(0)


def examples() -> list[tuple[list[str], str]]:
    """(arguments, output) of each ```console block."""
    blocks = re.findall(r"```console\n\$ kubectl kae (.*?)\n(.*?)```", plugin_section(), re.S)
    return [(shlex.split(command), output) for command, output in blocks]


def test_the_examples_are_the_plugins_output(api: HttpApiServer, tmp_path: Path) -> None:
    """nodes, devices and why, run on the same cluster, print what the README shows."""
    sm2 = {"requests": [exactly("crypto", HPRE_CLASS, selectors=[selector(SM2)])]}
    pending_with(api, "sm2", sm2)
    shown = examples()
    assert [args[0] for args, _ in shown] == ["nodes", "devices", "why"]
    for args, output in shown:
        result = kubectl_kae(api, tmp_path, *args)
        assert result.exit_code == 0, result.output
        assert result.stdout == output, args


def test_the_documented_role_covers_every_request_and_only_reads(
    api: HttpApiServer, tmp_path: Path
) -> None:
    """Each (verb, resource) the plugin sent while running the examples is granted; the role
    grants get and list only."""
    pending_with(api, "sm2", {"requests": [exactly("crypto", HPRE_CLASS)]})
    for args, _ in examples():
        assert kubectl_kae(api, tmp_path, *args).exit_code == 0
    block = re.search(
        r"```yaml\n(kind: ClusterRole.*?|apiVersion: rbac.*?)```", plugin_section(), re.S
    )
    assert block is not None
    role = yaml.safe_load(block.group(1))
    assert role["kind"] == "ClusterRole"
    granted = {
        (verb, resource)
        for rule in role["rules"]
        for verb in rule["verbs"]
        for resource in rule["resources"]
    }
    assert {verb for verb, _ in granted} == {"get", "list"}
    sent = {(r.verb, r.resource) for r in api.faults.log}
    assert sent <= granted, sent - granted
    assert {r for _, r in sent} == {r for _, r in granted}  # nothing granted that is not used
