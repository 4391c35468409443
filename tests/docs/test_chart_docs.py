"""What the README and the chart README say of the chart, against ``helm template``: the install
commands they show and the objects, namespaces and release names the lines after them use; the
RBAC rules they list against the rendered ClusterRole; the values table's defaults against
values.yaml. Skipped, saying so, without Helm 3 (as tests/deploy/test_deploy.py)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tests.deploy.test_deploy import CHART, helm_run
from tests.docs.markdown import CHART_README, code_spans, fenced_blocks, prose_lines, read

INSTALL_DOCS = ("README.md", CHART_README)
RBAC_DOCS = ("README.md", CHART_README, "deploy/dra/README.md")
CHART_PATH = "deploy/helm/kae-device-plugin"
VERBS = "get|list|watch|create|update|patch|delete|deletecollection"
# `resource` verb, verb and verb: one rule as the docs write it.
RULE = re.compile(rf"`([a-z]+(?:/[a-z]+)?)` ((?:{VERBS})(?:(?:,| and| or|, and) (?:{VERBS}))*)")


@dataclass(frozen=True)
class HelmCommand:
    verb: str  # install, upgrade, uninstall
    release: str
    namespace: str
    sets: tuple[str, ...]
    text: str


def helm_commands(text: str) -> Iterator[HelmCommand]:
    """Each ``helm install|upgrade|uninstall`` of a document, in shell blocks (continuation
    lines joined, comments dropped) and in code spans."""
    sources = [body.replace("\\\n", " ") for info, body in fenced_blocks(text) if info == "sh"]
    sources += [span for span in code_spans(text) if span.startswith("helm ")]
    for source in sources:
        for raw in source.splitlines():
            line = " ".join(raw.split(" #")[0].split())
            if re.match(r"helm (install|upgrade|uninstall) ", line):
                yield parse_helm(line)


def parse_helm(line: str) -> HelmCommand:
    words = shlex.split(line.replace('"$version"', "1.0.0").replace("$version", "1.0.0"))
    verb, release = words[1], words[2]
    namespace, sets = "default", []
    for index, word in enumerate(words):
        if word in {"--namespace", "-n"}:
            namespace = words[index + 1]
        elif word == "--set":
            sets.append(words[index + 1])
    return HelmCommand(verb, release, namespace, tuple(sets), line)


def render(release: str, namespace: str, sets: Sequence[str]) -> list[dict[str, Any]]:
    args = ["template", release, str(CHART), "--namespace", namespace]
    args += [a for s in sets for a in ("--set", s)]
    out = helm_run(*args)
    assert out.returncode == 0, f"helm template {' '.join(args[1:])}: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def install_problems(doc: str, text: str) -> list[str]:
    """Per install command: its DaemonSet is named (``ds/<name>``) where the document tells
    how to read its logs, and each upgrade or uninstall of its release names its namespace."""
    commands = list(helm_commands(text))
    installs = {c.release: c for c in commands if c.verb == "install"}
    problems = []
    for install in installs.values():
        for ds in (d for d in render(install.release, install.namespace, install.sets)
                   if d["kind"] == "DaemonSet"):  # fmt: skip
            name = ds["metadata"]["name"]
            if f"ds/{name}" not in text:
                problems.append(f"{doc}: `{install.text}` makes DaemonSet {name}, never named")
    for command in commands:
        if command.verb == "install":
            continue
        installed = installs.get(command.release)
        if installed is None:
            problems.append(f"{doc}: `{command.text}`: no install of that release")
        elif installed.namespace != command.namespace:
            problems.append(
                f"{doc}: `{command.text}`: the release is in {installed.namespace}, "
                f"this looks in {command.namespace}"
            )
    if doc == "README.md":
        for install in installs.values():
            if not any(c.verb == "uninstall" and c.release == install.release for c in commands):
                problems.append(f"{doc}: `{install.text}` has no uninstall line")
    return problems


def test_install_commands_and_the_lines_after_them_agree() -> None:
    """Troubleshooting, upgrade and uninstall lines name what the install commands make."""
    problems = [p for doc in INSTALL_DOCS for p in install_problems(doc, read(doc))]
    assert not problems, "\n".join(problems)


def documented_rules(text: str) -> list[set[tuple[str, str]]]:
    """Each paragraph that lists the driver's ClusterRole (one naming ``resourceslices`` with
    its verbs), as (resource, verb) pairs."""
    paragraphs = "\n".join(line.text for line in prose_lines(text)).split("\n\n")
    found = []
    for paragraph in paragraphs:
        flat = " ".join(paragraph.split())
        pairs = {
            (resource, verb)
            for resource, verbs in RULE.findall(flat)
            for verb in re.findall(VERBS, verbs)
        }
        if any(resource == "resourceslices" for resource, _ in pairs):
            found.append(pairs)
    return found


def rendered_rules() -> set[tuple[str, str]]:
    """The rules of the DRA driver's ClusterRole as the chart renders it."""
    roles = [
        d for d in render("kae", "kae-system", ["dra.enabled=true"]) if d["kind"] == "ClusterRole"
    ]
    return {
        (resource, verb)
        for role in roles
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def rbac_problems(doc: str, text: str, rendered: set[tuple[str, str]]) -> list[str]:
    problems = []
    for listed in documented_rules(text):
        if missing := rendered - listed:
            problems.append(f"{doc}: the ClusterRole also grants {sorted(missing)}")
        if extra := listed - rendered:
            problems.append(f"{doc}: the ClusterRole does not grant {sorted(extra)}")
    return problems


def test_the_rbac_the_docs_list_is_the_rendered_clusterrole() -> None:
    """What a host-process driver needs is what the chart grants: every list of the rules in
    the docs names exactly the rendered ClusterRole's resources and verbs."""
    rendered = rendered_rules()
    assert documented_rules(read(CHART_README)), "the chart README lists no ClusterRole rules"
    problems = [p for doc in RBAC_DOCS for p in rbac_problems(doc, read(doc), rendered)]
    assert not problems, "\n".join(problems)


def values_table(text: str) -> dict[str, str]:
    """The chart README's values table: key -> the default cell, where it is one code span."""
    rows = {}
    for line in prose_lines(text):
        cells = [c.strip() for c in line.text.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`[\w.]+`", cells[0]):
            default = re.fullmatch(r"`([^`]*)`", cells[1])
            rows[cells[0].strip("`")] = default[1] if default else ""
    return rows


def lookup(values: dict[str, Any], key: str) -> tuple[bool, Any]:
    node: Any = values
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def values_problems(text: str, values: dict[str, Any]) -> list[str]:
    problems = []
    for key, default in values_table(text).items():
        found, value = lookup(values, key)
        if not found:
            problems.append(f"{key}: not in values.yaml")
        elif default and yaml.safe_load(default) != value:
            problems.append(f"{key}: the README says {default}, values.yaml has {value!r}")
    return problems


def test_the_values_table_names_real_values_with_their_defaults() -> None:
    """Each row of the chart README's values table is a key of values.yaml, with its default
    where the row gives one as a value."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    problems = values_problems(read(CHART_README), values)
    assert not problems, "\n".join(problems)


def test_the_chart_doc_checks_can_fail() -> None:
    """A psa install whose DaemonSet no line names, an uninstall in the wrong namespace, a
    ClusterRole list missing a rule, and a wrong default are each caught."""
    text = (
        "```sh\nhelm install kae deploy/helm/kae-device-plugin --set psa.enabled=true\n```\n\n"
        "Logs: `kubectl -n kae-system logs ds/kae-device-plugin`; "
        "`helm uninstall kae --namespace kae-system`.\n"
    )
    assert install_problems("README.md", text) == [
        "README.md: `helm install kae deploy/helm/kae-device-plugin --set psa.enabled=true` "
        "makes DaemonSet kae-kae-device-plugin, never named",
        "README.md: `helm uninstall kae --namespace kae-system`: the release is in default, "
        "this looks in kae-system",
    ]
    listed = "A ClusterRole: `resourceslices` get, list and watch; `resourceclaims` get.\n"
    rendered = {("resourceslices", v) for v in ("get", "list", "watch")}
    rendered |= {("resourceclaims", "get"), ("resourceclaims/status", "patch")}
    assert rbac_problems("x.md", listed, rendered) == [
        "x.md: the ClusterRole also grants [('resourceclaims/status', 'patch')]"
    ]
    table = (
        "| `metrics.port` | `9411` | x |\n| `no.such` | `1` | x |\n"
        "| `psa.enabled` | `false` | x |\n"
    )
    values = {"metrics": {"port": 9410}, "psa": {"enabled": False}}
    assert values_problems(table, values) == [
        "metrics.port: the README says 9411, values.yaml has 9410",
        "no.such: not in values.yaml",
    ]


def host_path_table(text: str, values: dict[str, Any]) -> set[str]:
    """The host paths the chart README's security table lists, resolved with the default
    values: ``<kubeletRootDir>/x`` and value names (``config.stateDir``) become paths."""
    block = text.split("Host paths, each the narrowest", 1)[1].split("\n\n", 2)[1]
    paths = set()
    for line in block.splitlines()[2:]:
        for span in re.findall(r"`([^`]+)`", line.strip().strip("|").split("|")[0]):
            name = span.replace("<kubeletRootDir>", values["kubeletRootDir"])
            found, value = lookup(values, name)
            path = value if found else name
            if isinstance(path, str) and path.startswith("/"):
                paths.add(path)
    return paths


def rendered_host_paths(*sets: str) -> set[str]:
    return {
        volume["hostPath"]["path"]
        for d in render("kae", "kae-system", sets)
        if d["kind"] == "DaemonSet"
        for volume in d["spec"]["template"]["spec"]["volumes"]
        if "hostPath" in volume
    }


def test_the_host_path_table_lists_every_host_path_the_chart_mounts() -> None:
    """Each hostPath of a device-plugin, a CDI and a DRA render is a row of the chart README's
    table of host paths (with the default values)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    listed = host_path_table(read(CHART_README), values)
    mounted = set()
    for sets in ((), ("cdi.enabled=true",), ("dra.enabled=true",)):
        mounted |= rendered_host_paths(*sets)
    assert mounted - listed == set(), f"mounted, not in the table: {sorted(mounted - listed)}"
