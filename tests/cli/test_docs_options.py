"""Every ``--option`` and chart value the docs name exists, or belongs to another named tool."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click

from kae_deviceplugin.cli.main import main
from kae_deviceplugin.cli.serve_args import KNOWN_VARIABLES
from kae_deviceplugin.config.schema import OPTIONS
from kae_deviceplugin.kubectl.main import cli as kubectl_kae
from scripts.chart_tooling.chart_rules import misplaced

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "kae-device-plugin"
# The documents about this project's CLI, settings and chart (image.md and e2e.md are about
# other tools' command lines: buildah, docker, ctr).
DOCS = (
    "README.md",
    "CHANGELOG.md",
    "docs/configuration.md",
    "docs/architecture.md",
    "docs/internals.md",
    "docs/observability.md",
    "docs/upgrading.md",
    "docs/compatibility.md",
)
CHART_DOCS = (*DOCS, "deploy/helm/kae-device-plugin/README.md", "docs/image.md", "docs/e2e.md")
# Options of other programs the docs show, each with the tool it belongs to.
OTHER_TOOLS = {
    "--check": "scripts/render-config-reference.py, scripts/render-chart-schema.py, "
    "sysfs_fixtures/generate.py",
    "--create-namespace": "helm",
    "--namespace": "helm",
    "--set": "helm",
    "--set-string": "helm",
    "--field-selector": "kubectl",
    "--reuse-values": "helm",
    "--dry-run": "helm",
    "--isolation": "buildah",
    "--platform": "docker buildx",
    "--build-arg": "docker buildx",
    "--push": "docker buildx",
    "--only": "benchmarks/run.py",
    "--quick": "benchmarks/run.py",
    "--smoke": "benchmarks/cluster.py",
    "--root-dir": "the kubelet",
    "--strict": "mypy, kubernetes-validate",
    "--no-deps": "pip wheel",
}
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
# A chart value as the docs write it: `--set a.b=...`, or `a.b` in backticks.
SET_VALUE = re.compile(r"--set(?:-string|-json)?[ =]([A-Za-z][\w.]*)=")
FILE_SUFFIXES = {"yaml", "json", "md", "txt", "tpl", "sock"}  # `config.yaml` is a file name
TICKED_VALUE = re.compile(r"`([a-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)+)(?:=[^`]*)?`")


def our_options() -> set[str]:
    """Every long option of every kae-deviceplugin command, and of the kubectl-kae plugin's."""
    options = {"--version", "--help"}
    for group in (main, kubectl_kae):
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
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


# The documents that name environment variables: the product's and the test stages' own
# (CHANGELOG.md aside: it names what was).
ENV_DOCS = (
    *(doc for doc in CHART_DOCS if doc != "CHANGELOG.md"),
    "docs/benchmarks.md",
    "docs/performance.md",
    "deploy/dra/README.md",
    "benchmarks/README.md",
)
# KAE_* as a whole word; KAE_DP_* and KAE_<ENGINE>_* patterns end in ``*`` or ``<``.
ENV_VAR = re.compile(r"(?<![\w$-])KAE_[A-Z0-9_]*[A-Z0-9](?![\w*<])")
# What the docs name on purpose although no code reads it.
NOT_READ = {"KAE_DP_SCAN_INTERVALL": "README: the misspelling the warning's example corrects"}
# Files that read or set variables: the package, scripts, tests, the chart, the image.
SOURCE_SUFFIXES = {".py", ".sh", ".tpl", ".yaml", ""}


def variable_sources() -> str:
    """The text of every file that may read or set an environment variable."""
    texts = []
    for top in ("kae_deviceplugin", "scripts", "tests", "benchmarks", "deploy", ".ci"):
        for path in (REPO / top).rglob("*"):
            if (
                path.is_file()
                and path.suffix in SOURCE_SUFFIXES
                and "__pycache__" not in path.parts
            ):
                if path == Path(__file__):  # this file names made-up variables on purpose
                    continue
                texts.append(path.read_text(errors="replace"))
    texts.append((REPO / "Dockerfile").read_text())
    return "\n".join(texts)


def unknown_variables(text: str, sources: str) -> set[str]:
    """``KAE_*`` names in ``text`` that nothing sets or reads: a ``KAE_DP_*`` name must be one
    the CLI reads (``serve_args.KNOWN_VARIABLES``, what the unknown-variable warning knows);
    any other must be in the code, whole or as ``_<SUFFIX>`` of an engine's prefix
    (``KAE_ZIP_QUEUES`` is ``f"{engine.env_prefix}_QUEUES"``)."""
    unknown = set()
    for name in set(ENV_VAR.findall(text)) - set(NOT_READ):
        if name.startswith("KAE_DP_"):
            if name not in KNOWN_VARIABLES:
                unknown.add(name)
            continue
        engine = re.fullmatch(r"KAE_(HPRE|SEC|ZIP)(_[A-Z_]+)", name)
        if re.search(rf"\b{name}\b", sources) is None and not (
            engine and f'env_prefix}}{engine[2]}"' in sources
        ):
            unknown.add(name)
    return unknown


def test_every_environment_variable_the_docs_name_exists() -> None:
    """A ``KAE_*`` variable renamed or removed in the code fails here until the docs follow."""
    sources = variable_sources()
    unknown = {
        f"{doc}: {name}"
        for doc in ENV_DOCS
        for name in unknown_variables((REPO / doc).read_text(), sources)
    }
    assert not unknown, f"variables nothing reads or sets: {sorted(unknown)}"


def test_the_environment_variable_check_can_fail() -> None:
    """A setting's variable misspelt, an engine variable and a test stage's variable that the
    code does not have are caught; real ones and patterns are not."""
    text = (
        "`KAE_DP_SCAN_INTERVAL`, `KAE_DP_SCAN_INTERVALS`, `KAE_DP_*`, KAE_<ENGINE>_DEVICES,\n"
        "`KAE_ZIP_QUEUES=8`, `KAE_ZIP_SLOTS`, `KAE_E2E_CDI=off`, `KAE_E2E_NO_SUCH`\n"
    )
    assert unknown_variables(text, variable_sources()) == {
        "KAE_DP_SCAN_INTERVALS",
        "KAE_ZIP_SLOTS",
        "KAE_E2E_NO_SUCH",
    }


def chart_accepts(schema: dict[str, Any], path: str) -> bool:
    """Whether values.schema.json has the value at ``path``: each part a property, or a key of
    a map (``configs.<name>`` continues with config's own properties; a free-form map such as
    ``nodeSelector`` takes any key). The daemon's dra keys under the chart's ``dra`` are in the
    schema only to be refused with a pointer by the chart: no chart value."""
    if path in misplaced():
        return False
    node = schema
    for part in path.split("."):
        extra = node.get("additionalProperties")
        if part in node.get("properties", {}):
            node = node["properties"][part]
        elif isinstance(extra, dict) and "properties" in extra:
            node = extra
        else:  # a free-form map takes any key; anything else does not have this one
            return isinstance(extra, dict) or (
                node.get("type") == "object" and "properties" not in node
            )
    return True


# The daemon's own file keys: ticked, `dra.nodeName` is the config file's key even though the
# chart has a top-level value `dra` (set with --set, it would be a chart value, and checked).
DAEMON_FILE_KEYS = frozenset(option.key for option in OPTIONS)


def named_chart_values(
    text: str, top_level: set[str], file_keys: frozenset[str] = frozenset()
) -> set[str]:
    """The chart values a document names: each `--set` key, and each ticked dotted name whose
    first part is a top-level chart value (`engines.hpre.enabled` is a daemon file key, and so
    is any of ``file_keys``)."""
    named = {m[1] for m in SET_VALUE.finditer(text)}
    named |= {
        m[1]
        for m in TICKED_VALUE.finditer(text)
        if m[1].split(".")[0] in top_level and m[1] not in file_keys
    }
    return {name for name in named if name.rpartition(".")[2] not in FILE_SUFFIXES}


def test_every_chart_value_the_docs_name_exists() -> None:
    """A chart value renamed or removed in values.schema.json fails here until the docs follow."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    top_level = set(schema["properties"])
    missing = {
        value: doc
        for doc in CHART_DOCS
        for value in named_chart_values((REPO / doc).read_text(), top_level, DAEMON_FILE_KEYS)
        if not chart_accepts(schema, value)
    }
    assert not missing, f"chart values the chart does not have: {missing}"


def test_the_chart_value_check_can_fail() -> None:
    """A misspelt value is caught, whether ticked or set; a daemon file key is left alone."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    names = named_chart_values(
        "`psa.namespaces` and --set nfd.requireLabels=false, `engines.hpre.enabled`",
        set(schema["properties"]),
    )
    assert names == {"psa.namespaces", "nfd.requireLabels"}
    # A daemon file key that shares its first part with a chart value is the daemon's when
    # ticked, and a chart value (here a wrong one) when set.
    text = "`dra.nodeName` and `dra.nodeScopedPolcy`, --set dra.nodeName=x"
    names = named_chart_values(text, set(schema["properties"]), DAEMON_FILE_KEYS)
    assert names == {"dra.nodeScopedPolcy", "dra.nodeName"}
    assert not any(chart_accepts(schema, name) for name in names)
    assert not any(chart_accepts(schema, name) for name in names)
    assert chart_accepts(schema, "configs.vf-only.engines.sec.functions")
    assert not chart_accepts(schema, "configs.vf-only.engines.sec.function")
    assert chart_accepts(schema, "podLabels.team")
