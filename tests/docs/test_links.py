"""Every relative link of every Markdown file reaches a file of the repository, and every
``#anchor`` a heading of its target, by GitHub's anchor rules."""

from __future__ import annotations

from urllib.parse import unquote

from tests.docs.markdown import REPO, anchors, links, markdown_files, read, slug

EXTERNAL = ("http://", "https://", "mailto:", "ftp://")


def broken_links(relative: str, text: str) -> list[str]:
    """What is wrong with each relative link of ``text`` (the document at ``relative``)."""
    problems = []
    for number, target in links(text):
        if not target or target.startswith(EXTERNAL):
            continue
        path_part, _, fragment = target.partition("#")
        base = (REPO / relative).parent
        resolved = (base / unquote(path_part)).resolve() if path_part else REPO / relative
        where = f"{relative}:{number} ({target})"
        if REPO.resolve() not in (resolved, *resolved.parents):
            problems.append(f"{where}: leaves the repository")
        elif not resolved.exists():
            problems.append(f"{where}: no such file")
        elif fragment and resolved.suffix == ".md":
            name = resolved.relative_to(REPO.resolve()).as_posix()
            if unquote(fragment).lower() not in anchors(name):
                problems.append(f"{where}: no heading with that anchor in {name}")
    return problems


def test_every_relative_link_and_anchor_resolves() -> None:
    """A renamed heading or moved file fails here until every link to it follows."""
    problems = [p for doc in markdown_files() for p in broken_links(doc, read(doc))]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_link_check_knows_githubs_anchors_and_can_fail() -> None:
    """Anchors are GitHub's (code and punctuation as GitHub drops them, repeats numbered);
    a missing file, a missing anchor and a link out of the repository are each reported."""
    assert slug("`kubectl kae`: the pool, read") == "kubectl-kae-the-pool-read"
    assert slug("Scheduling: what our slices cost the scheduler") == (
        "scheduling-what-our-slices-cost-the-scheduler"
    )
    assert "dynamic-resource-allocation" in anchors("README.md")
    assert "list" in anchors("README.md")  # ### `list`
    text = (
        "[a](docs/nowhere.md) [b](docs/upgrading.md#no-such-heading) [c](../../etc/passwd)\n"
        "[ok](docs/upgrading.md#dra-mode) [self](#two-commands) `[code](not/a/link.md)`\n"
        "```\n[fenced](not/a/link.md)\n```\n"
    )
    problems = broken_links("README.md", text)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "no such file",
        "no heading with that anchor in docs/upgrading.md",
        "leaves the repository",
    ], problems
