"""Markdown files, parsed with markdown-it-py (CommonMark plus GFM tables) into plain text.

* Decoding: strict UTF-8 (``base.decode_utf8``); NUL bytes or invalid UTF-8 are ``invalid_utf8``,
  so a binary file under a ``.md`` name is quarantined rather than indexed as mojibake.
* Front matter: a YAML mapping between a ``---`` first line and the next ``---`` or ``...`` line is
  dropped from the text; its ``title`` gives the title, its ``author`` and ``tags`` go to
  metadata. A leading ``---`` block that is not a YAML mapping is ordinary Markdown.
* Headings: ATX (``## B``) and setext (underlined) headings; each block carries the nearest
  heading above it. A ``#`` line inside a code fence is code, not a heading (the parser's tokens
  say so). Heading text is the block's ``heading``, not part of its text.
* Text: inline code and link text are kept, URLs and inline HTML tags dropped, images give their
  alt text; code fences and indented code are kept verbatim (they are content); a table row
  becomes one line of cells joined by `` | ``; an HTML block gives its text content.
* Title: front matter ``title``, else the first h1, else the first heading, else None.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from lxml import etree
from lxml import html as lxml_html
from markdown_it import MarkdownIt
from markdown_it.token import Token

from retrieval_assets.core.ingest.sources.formats.base import BlockCollector, ExtractedFile, MetadataScalar, decode_utf8

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*$\r?\n?", re.DOTALL | re.MULTILINE)
_PARSER = MarkdownIt("commonmark").enable("table")


def extract_markdown(data: bytes) -> ExtractedFile:
    text = decode_utf8(data)
    front, text = _split_front_matter(text)
    collector = BlockCollector()
    first_h1: str | None = None
    row: list[str] = []
    heading_tag: str | None = None  # h1..h6 while inside a heading
    in_cell = False
    for token in _PARSER.parse(text):
        if token.type == "heading_open":
            heading_tag = token.tag
        elif token.type == "heading_close":
            heading_tag = None
        elif token.type == "inline" and heading_tag is not None:
            heading = " ".join(_inline_text(token).split())
            collector.heading(heading)
            if first_h1 is None and heading_tag == "h1" and heading:
                first_h1 = heading
        elif token.type in ("th_open", "td_open"):
            in_cell = True
        elif token.type in ("th_close", "td_close"):
            in_cell = False
        elif token.type == "inline" and in_cell:
            row.append(_inline_text(token).strip())
        elif token.type == "inline":
            collector.add(_inline_text(token))
        elif token.type == "tr_close":
            collector.add(" | ".join(row))
            row = []
        elif token.type in ("fence", "code_block"):
            collector.add(token.content.rstrip("\n"))
        elif token.type == "html_block":
            collector.add(_html_text(token.content))
    title = front.get("title")
    metadata: dict[str, MetadataScalar] = {}
    if isinstance(front.get("author"), str):
        metadata["author"] = front["author"]
    tags = front.get("tags")
    if isinstance(tags, list) and all(isinstance(tag, str) for tag in tags):
        metadata["tags"] = tags
    return ExtractedFile(
        format="markdown",
        title=title.strip() if isinstance(title, str) and title.strip() else first_h1 or collector.first_heading,
        blocks=collector.blocks(),
        metadata=metadata,
    )


def _split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    match = _FRONT_MATTER.match(text)
    if match is None:
        return {}, text
    try:
        front = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return {}, text
    if not isinstance(front, dict):
        return {}, text
    return front, text[match.end() :]


def _inline_text(token: Token) -> str:
    parts: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline", "image"):
            parts.append(child.content)
        elif child.type == "softbreak":
            parts.append(" ")
        elif child.type == "hardbreak":
            parts.append("\n")
    return "".join(parts)


def _html_text(markup: str) -> str:
    if not markup.strip():
        return ""
    try:
        return str(lxml_html.fragment_fromstring(markup, create_parent="div").text_content())
    except (etree.ParserError, ValueError):
        return ""
