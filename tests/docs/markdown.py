"""Reading the repository's Markdown as GitHub renders it: headings and their anchors, links,
code spans, prose without fenced blocks.

Only what the doc checks need; no Markdown library (the rules used are few and GitHub's own).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART_README = "deploy/helm/kae-device-plugin/README.md"
# The documents that describe the product as it is now. CHANGELOG.md describes what changed,
# naming what was there then: only its links are checked.
CURRENT_DOCS = (
    "README.md",
    "docs/architecture.md",
    "docs/benchmarks.md",
    "docs/compatibility.md",
    "docs/configuration.md",
    "docs/e2e.md",
    "docs/image.md",
    "docs/internals.md",
    "docs/observability.md",
    "docs/performance.md",
    "docs/upgrading.md",
    CHART_README,
    "deploy/dra/README.md",
    "sysfs_fixtures/README.md",
    "benchmarks/README.md",
)

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
# An inline link or image: [text](target "title"); the target has no spaces unless in <...>.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def markdown_files() -> list[str]:
    """Every Markdown file of the repository (relative paths), outside hidden and tool dirs."""
    found = []
    for path in REPO.rglob("*.md"):
        parts = path.relative_to(REPO).parts
        if any(part.startswith(".") or part in {"node_modules", "__pycache__"} for part in parts):
            continue
        found.append(path.relative_to(REPO).as_posix())
    return sorted(found)


@dataclass(frozen=True)
class Line:
    number: int
    text: str


def prose_lines(text: str) -> Iterator[Line]:
    """The lines outside fenced code blocks (a fence closes with the same character, at least
    as long), numbered from 1."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened[1]
            continue
        if fence is not None:
            if opened and opened[1][0] == fence[0] and len(opened[1]) >= len(fence):
                fence = None
            continue
        yield Line(number, line)


def fenced_blocks(text: str) -> Iterator[tuple[str, str]]:
    """Each fenced code block's info string and its text."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        fence, info = opened[1], lines[index][opened.end() :].strip()
        body: list[str] = []
        index += 1
        while index < len(lines):
            closing = FENCE.match(lines[index])
            if closing and closing[1][0] == fence[0] and len(closing[1]) >= len(fence):
                break
            body.append(lines[index])
            index += 1
        index += 1
        yield info, "\n".join(body)


def heading_text(raw: str) -> str:
    """A heading's text as GitHub reads it for the anchor: links by their text, emphasis and
    code markers dropped (the code's text stays)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "").replace("*", "").replace("~~", "")


def slug(text: str) -> str:
    """GitHub's anchor for a heading text: lower case; letters, digits, ``_``, ``-`` and spaces
    kept, spaces made ``-``, everything else (punctuation, symbols) dropped."""
    kept = [
        c
        for c in text.strip().lower()
        if c in " -_" or unicodedata.category(c)[0] in {"L", "N"} or unicodedata.category(c) == "Mn"
    ]
    return "".join(kept).replace(" ", "-")


@cache
def anchors(relative: str) -> frozenset[str]:
    """Every anchor of a Markdown file: its headings' slugs (a repeated slug gets ``-1``,
    ``-2``, ... as GitHub numbers them) and explicit ``<a name|id>`` anchors."""
    text = (REPO / relative).read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in prose_lines(text):
        found.update(HTML_ANCHOR.findall(line.text))
        heading = HEADING.match(line.text)
        if not heading:
            continue
        base = slug(heading_text(heading[2]))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def without_code_spans(text: str) -> str:
    """``text`` with its code spans blanked (their length kept), so links are not read there."""
    return CODE_SPAN.sub(lambda m: " " * len(m[0]), text)


def links(text: str) -> Iterator[tuple[int, str]]:
    """Each link target of a document with its line: inline links and images outside code,
    and reference definitions."""
    for line in prose_lines(text):
        for match in INLINE_LINK.finditer(without_code_spans(line.text)):
            yield line.number, match[1]
    prose = "\n".join(line.text for line in prose_lines(text))
    for match in REFERENCE_DEFINITION.finditer(prose):
        yield 0, match[1]


def code_spans(text: str) -> Iterator[str]:
    """The text of every code span outside fenced blocks (a span may continue on the next
    line, as in Markdown)."""
    prose = "\n".join(line.text for line in prose_lines(text))
    for match in CODE_SPAN.finditer(prose):
        yield " ".join(match[2].split())


def read(relative: str) -> str:
    return (REPO / relative).read_text(encoding="utf-8")
