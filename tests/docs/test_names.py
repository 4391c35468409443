"""The modules and files the docs name exist: ``kae_deviceplugin/x/y.py`` and
``kae_deviceplugin.x.y`` (with the attribute they name), paths of the repository, and
Markdown or Python files named alone."""

from __future__ import annotations

import importlib
import re
from functools import cache

from tests.docs.markdown import CURRENT_DOCS, REPO, code_spans, prose_lines, read

PACKAGE = "kae_deviceplugin"
TOP_LEVEL = frozenset(
    p.name for p in REPO.iterdir() if p.name not in {".git", ".venv", ".tools", "__pycache__"}
)
DOTTED = re.compile(r"^kae_deviceplugin(?:\.[A-Za-z_][A-Za-z0-9_]*)+$")
# A path as the docs write one in code: letters, digits, ``._-/``; globs, placeholders and
# variables are no single file.
PATH = re.compile(r"^\.?[A-Za-z0-9_][A-Za-z0-9_.\-/]*$")
REPO_FILE_SUFFIXES = (".py", ".md", ".sh", ".json", ".yaml", ".tpl", ".toml", ".go", ".c")
# A Markdown file named in prose (FACTS.md, docs/e2e.md), outside code and links.
MARKDOWN_NAME = re.compile(r"(?<![\w./-])([A-Za-z0-9_][\w./-]*\.md)\b")
# Files the docs name that are not this repository's: other projects' sources, files a run
# writes, documents of other sites.
NOT_OURS = frozenset(
    {
        "config.yaml",  # the daemon's config file on a node (/etc/kae-deviceplugin/config.yaml)
        "checkpoint.json",  # the DRA driver's checkpoint, written on the node
        "daemon.json",  # iSulad's config
        "kubelet.go",
        # Node Feature Discovery's own repository (docs/e2e.md: where the CRDs are copied from)
        "deployment/base/nfd-crds/nfd-api-crds.yaml",
    }
)
# Files a document names as gone, saying so beside the name (a measurement's record).
GONE = {
    ("benchmarks/README.md", "apiserver/lightkube_api.py"),  # "then, since replaced by ..."
    ("docs/benchmarks.md", "apiserver/deferred.py"),  # "(since removed ...)"
}
# A pytest node id: a test file and the test in it.
NODE_ID = re.compile(r"^([\w./-]+\.py)::(\w+)")


@cache
def tracked_files() -> tuple[str, ...]:
    """Every file of the repository's tree, relative, outside hidden and tool directories."""
    found = []
    for path in REPO.rglob("*"):
        parts = path.relative_to(REPO).parts
        if any((p.startswith(".") and p != ".ci") or p == "__pycache__" for p in parts):
            continue
        found.append(path.relative_to(REPO).as_posix())
    return tuple(found)


def module_exists(dotted: str) -> bool:
    """``kae_deviceplugin.a.b`` is a module, or a module's attribute (``...sysfs_trees.TREES``)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        target: object = module
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def path_exists(path: str, doc: str) -> bool:
    """A path the docs name is in the repository: from its root, beside the document, in the
    package (``dra/publisher.py``), or, for a partial path such as ``templates/x.yaml``, as
    the end of one file's path."""
    path = path.rstrip("/")
    if (REPO / path).exists() or (REPO / doc).parent.joinpath(path).exists():
        return True
    if (REPO / PACKAGE / path).exists():
        return True
    first = path.split("/")[0]
    if first in TOP_LEVEL or first == PACKAGE:
        return False  # rooted in the repository: it must be there exactly
    return any(f == path or f.endswith("/" + path) for f in tracked_files())


def named_paths(text: str) -> set[str]:
    """Code spans that name a file or directory of the repository: a path under one of its
    top-level entries or the package, or any path ending in a source or doc suffix."""
    named = set()
    for span in code_spans(text):
        token = re.sub(r"^python3? ", "", span).split(" ")[0].split("::")[0]
        if not PATH.match(token) or "//" in token or token in NOT_OURS:
            continue
        rooted = token.split("/")[0] in {*TOP_LEVEL, PACKAGE}
        partial = "/" in token and token.endswith(REPO_FILE_SUFFIXES)
        if rooted or partial or token.endswith((".py", ".md")):
            named.add(token)
    return named


def named_tests(text: str) -> set[tuple[str, str]]:
    """The tests named by node id (``test_helm.py::test_install``): file and function."""
    return {(m[1], m[2]) for span in code_spans(text) if (m := NODE_ID.match(span))}


def has_test(path: str, name: str, doc: str) -> bool:
    """``def name`` (or ``async def``) is in the one test file ``path`` names."""
    candidates = [f for f in tracked_files() if f == path or f.endswith("/" + path)]
    beside = (REPO / doc).parent / path
    files = [REPO / f for f in candidates] + ([beside] if beside.exists() else [])
    pattern = re.compile(rf"^\s*(?:async )?def {name}\(", re.M)
    return any(pattern.search(f.read_text(encoding="utf-8")) for f in files)


def named_modules(text: str) -> set[str]:
    return {span for span in code_spans(text) if DOTTED.match(span)}


def named_markdown(text: str) -> set[str]:
    """Markdown files named in prose, not in a link's target (checked by test_links)."""
    names = set()
    for line in prose_lines(text):
        bare = re.sub(r"\]\([^)]*\)", "]", line.text)  # link targets out
        bare = re.sub(r"`[^`]*`", "", bare)  # code is checked by named_paths
        bare = re.sub(r"https?://\S+", "", bare)
        names.update(MARKDOWN_NAME.findall(bare))
    return names


def missing_names(doc: str, text: str) -> list[str]:
    missing = [f"{doc}: module {m}" for m in sorted(named_modules(text)) if not module_exists(m)]
    missing += [
        f"{doc}: path {p}"
        for p in sorted(named_paths(text))
        if not path_exists(p, doc) and (doc, p) not in GONE
    ]
    missing += [
        f"{doc}: test {path}::{name}"
        for path, name in sorted(named_tests(text))
        if not has_test(path, name, doc)
    ]
    missing += [f"{doc}: file {n}" for n in sorted(named_markdown(text)) if not path_exists(n, doc)]
    return missing


def test_every_module_and_file_the_docs_name_exists() -> None:
    """A module moved or a file renamed fails here until the docs name the new one."""
    missing = [m for doc in CURRENT_DOCS for m in missing_names(doc, read(doc))]
    assert not missing, "named in the docs, not in the repository:\n" + "\n".join(missing)


def test_the_name_check_can_fail() -> None:
    """A moved module (path or dotted), an attribute a module lacks and a Markdown file the
    repository does not have are each caught; real ones and the node's own files are not."""
    text = (
        "`kae_deviceplugin/sysfs_layout.py`, `kae_deviceplugin.sysfs_trees`,\n"
        "`kae_deviceplugin.testing.sysfs_trees.NO_SUCH`, see FACTS.md section 3.\n"
        "`kae_deviceplugin/testing/sysfs_layout.py`,\n"
        "`kae_deviceplugin.testing.sysfs_trees.TREES`,\n"
        "`apiserver/paced.py`, `templates/dra-deviceclasses.yaml`, docs/e2e.md, `config.yaml`,\n"
        "`scripts/cluster/up`, `/etc/containerd/config.toml`, `<kubelet-root>/plugins`.\n"
        "`test_psa.py::test_no_such_test`,\n"
        "`tests/docs/test_names.py::test_the_name_check_can_fail`\n"
    )
    assert missing_names("sysfs_fixtures/README.md", text) == [
        "sysfs_fixtures/README.md: module kae_deviceplugin.sysfs_trees",
        "sysfs_fixtures/README.md: module kae_deviceplugin.testing.sysfs_trees.NO_SUCH",
        "sysfs_fixtures/README.md: path kae_deviceplugin/sysfs_layout.py",
        "sysfs_fixtures/README.md: test test_psa.py::test_no_such_test",
        "sysfs_fixtures/README.md: file FACTS.md",
    ]


# pip or pipx asked for this project by name: no package index serves it.
BY_NAME = re.compile(r"\bpipx? install\b[^\n`]*?\s['\"]?kae[-_]deviceplugin\b")


def installs_by_name(text: str) -> list[str]:
    return [m[0] for m in BY_NAME.finditer(text)]


def test_the_package_is_installed_from_a_checkout_or_a_wheel() -> None:
    """The project is on no package index: a doc that tells pip to fetch it by name fails."""
    found = [f"{doc}: {c}" for doc in CURRENT_DOCS for c in installs_by_name(read(doc))]
    assert not found, "installs from an index that does not serve the package:\n" + "\n".join(found)


def test_the_install_check_can_fail() -> None:
    """A name (quoted, with extras, through pipx) is caught; a path or a wheel file is not."""
    text = (
        "pip install 'kae-deviceplugin[kubectl]'   # or: pipx install kae_deviceplugin\n"
        "pip install '.[kubectl]'\npip install \"$(echo dist/kae_deviceplugin-*.whl)[kubectl]\"\n"
    )
    assert installs_by_name(text) == [
        "pip install 'kae-deviceplugin",
        "pipx install kae_deviceplugin",
    ]
