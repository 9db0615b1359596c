"""HTML files: the main text found by trafilatura, with its headings kept as block headings.

* Decoding: a byte-order mark, else the ``<meta charset>`` (or ``http-equiv`` Content-Type)
  declared in the first 4 KiB, else UTF-8; bytes that do not decode strictly in that encoding,
  or that hold NUL characters (a binary file), are ``invalid_utf8``.
* Main text: ``trafilatura.extract`` on the decoded string (it fetches nothing) with tables and
  without comments drops navigation, footers and cookie banners. Its XML output marks h1-h6 as
  ``<head rend="h2">``; each block carries the nearest such heading. Table rows become lines of
  cells joined by `` | ``, list items lines.
* Fallback: when trafilatura keeps nothing (it can discard a very short page as boilerplate), the
  text of ``<body>`` without scripts and styles is one block, so a short page is not lost. A page
  with no text at all gives no blocks (``empty_text`` for the caller).
* Title: trafilatura's metadata title, else ``<title>``; ``author`` goes to metadata.
"""

from __future__ import annotations

import codecs
import re

import trafilatura
from lxml import etree
from lxml import html as lxml_html

from retrieval_assets.core.ingest.reasons import QuarantineReason
from retrieval_assets.core.ingest.sources.formats.base import BlockCollector, ExtractedFile, MetadataScalar
from retrieval_assets.core.ingest.sources.records import ExtractionFailed

_DECLARED_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?\s*([A-Za-z0-9._:-]+)", re.IGNORECASE)
_XML_DECLARATION = re.compile(r"\A\s*<\?xml[^>]*\?>")
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_NOT_TEXT = ("script", "style", "noscript", "template")


def extract_html(data: bytes) -> ExtractedFile:
    text = _decode(data)
    collector = BlockCollector()
    metadata: dict[str, MetadataScalar] = {}
    title: str | None = None
    xml = trafilatura.extract(
        text, output_format="xml", include_comments=False, include_tables=True, with_metadata=True
    )
    if xml:
        document = etree.fromstring(xml.encode("utf-8"))
        for line_break in document.iter("lb"):
            line_break.tail = "\n" + (line_break.tail or "")
        for main in document.iter("main"):
            _collect(main, collector)
        title = document.get("title") or None
        if document.get("author"):
            metadata["author"] = document.get("author")
    blocks = collector.blocks()
    if not blocks or title is None:
        page = _parse_page(text)
        if page is not None and not blocks:
            fallback = BlockCollector()
            fallback.add(_body_text(page))
            blocks = fallback.blocks()
        if page is not None and title is None:
            title = " ".join((page.findtext(".//title") or "").split()) or None
    return ExtractedFile(format="html", title=title or collector.first_heading, blocks=blocks, metadata=metadata)


def _decode(data: bytes) -> str:
    encoding = "utf-8"
    for bom, bom_encoding in _BOMS:
        if data.startswith(bom):
            encoding = bom_encoding
            break
    else:
        declared = _DECLARED_CHARSET.search(data[:4096])
        if declared:
            try:
                encoding = codecs.lookup(declared.group(1).decode("ascii")).name
            except LookupError:
                pass  # an unknown charset name: UTF-8, the web's default
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ExtractionFailed(QuarantineReason.INVALID_UTF8, f"not valid {encoding}: {exc}") from None
    text = _XML_DECLARATION.sub("", text)  # lxml refuses a str that declares an encoding
    if "\x00" in text:
        raise ExtractionFailed(QuarantineReason.INVALID_UTF8, "NUL characters: a binary file, not HTML")
    return text


def _collect(element: etree._Element, collector: BlockCollector) -> None:
    for child in element:
        if child.tag == "head":
            collector.heading(_text(child))
        elif child.tag == "table":
            for row in child.iter("row"):
                collector.add(" | ".join(_text(cell) for cell in row.iter("cell")))
        elif child.tag == "list":
            for item in child.iter("item"):
                collector.add(_text(item))
        elif child.tag == "div":
            _collect(child, collector)
        else:
            collector.add(_text(child))


def _text(element: etree._Element) -> str:
    return "\n".join(" ".join(line.split()) for line in "".join(element.itertext()).split("\n")).strip()


def _parse_page(text: str) -> lxml_html.HtmlElement | None:
    if not text.strip():
        return None
    try:
        return lxml_html.document_fromstring(text)
    except (etree.ParserError, ValueError):
        return None


def _body_text(page: lxml_html.HtmlElement) -> str:
    body = page.find("body")
    if body is None:
        return ""
    for element in list(body.iter(*_NOT_TEXT)):
        element.drop_tree()
    return " ".join(body.text_content().split())
