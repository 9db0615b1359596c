"""Every relative link in the README and the docs points at a file that exists and, when it names
an ``#anchor``, at a heading of that file (GitHub's heading slugs)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = sorted(
    [ROOT / "README.md", ROOT / "docker" / "README.md", ROOT / "data" / "README.md", *(ROOT / "docs").rglob("*.md")]
)

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.MULTILINE)
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.MULTILINE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _prose(markdown: str) -> str:
    """The text outside fenced code blocks and code spans, where links and headings live."""
    return CODE_SPAN.sub("", FENCE.sub("", markdown))


def heading_slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text lower-cased, punctuation other than ``-``
    and ``_`` removed, each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown file's headings; a repeated heading gets ``-1``, ``-2``, ..."""
    seen: Counter[str] = Counter()
    found = set()
    for match in HEADING.finditer(FENCE.sub("", markdown)):
        slug = heading_slug(match.group(1))
        found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return found


def broken_links(document: Path) -> list[str]:
    """Each relative link of ``document`` whose file or heading does not exist."""
    prose = _prose(document.read_text(encoding="utf-8"))
    targets = [m.group(1) for m in INLINE_LINK.finditer(prose)] + REFERENCE_DEFINITION.findall(prose)
    broken = []
    for target in targets:
        if not target or SCHEME.match(target):  # web addresses and mailto: are not checked here
            continue
        path_part, _, anchor = target.partition("#")
        linked = (document.parent / path_part).resolve() if path_part else document
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves(document: Path) -> None:
    assert broken_links(document) == []


def test_docs_exist() -> None:
    assert (ROOT / "docs" / "benchmarks" / "README.md") in DOCUMENTS


def test_a_broken_file_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Query micro-batching\n\n## Query micro-batching\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Learned per catalog: `retrieval_configuration`\n\n"
        "[ok](other.md#query-micro-batching) [repeat](other.md#query-micro-batching-1)\n"
        "[self](#learned-per-catalog-retrieval_configuration)\n"
        "[web](https://example.com/missing) `[in code](missing.md)`\n"
        "```\n[in a fence](missing.md)\n```\n"
        "[gone](missing.md) [no heading](other.md#no-such-heading) [ref]\n\n[ref]: ./also-missing.md\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#no-such-heading: no heading #no-such-heading in other.md",
        "./also-missing.md: no such file",
    ]
