"""What every format extractor returns, and the pieces they share: strict UTF-8 decoding and
collecting paragraphs into one ``TextBlock`` per (heading, page)."""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field

from retrieval_assets.core.ingest.reasons import QuarantineReason
from retrieval_assets.core.ingest.sources.records import ExtractionFailed, TextBlock

MetadataScalar = str | int | float | bool | list[str]


@dataclass(frozen=True)
class ExtractedFile:
    """A file's text: ``blocks`` in reading order, ``title`` from the file's own metadata (else
    its first heading; None when it has neither), ``pages`` for paged formats."""

    format: str  # "pdf", "html", "markdown", "docx" or "text"
    title: str | None
    blocks: list[TextBlock]
    pages: int | None = None
    metadata: dict[str, MetadataScalar] = field(default_factory=dict)


def decode_utf8(data: bytes) -> str:
    """Strict UTF-8 with a leading byte-order mark removed. NUL bytes never occur in text, so a
    file holding one is binary (an image or archive under a text name): ``invalid_utf8`` too."""
    if b"\x00" in data:
        raise ExtractionFailed(QuarantineReason.INVALID_UTF8, "NUL bytes: a binary file, not text")
    try:
        return data.removeprefix(codecs.BOM_UTF8).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ExtractionFailed(QuarantineReason.INVALID_UTF8, f"not UTF-8: {exc}") from None


def short_line(text: str, max_words: int) -> bool:
    return 0 < len(text.split()) <= max_words


class BlockCollector:
    """Paragraphs in reading order, grouped under the nearest heading and the current page; a new
    block starts whenever either changes. Paragraphs of one block are separated by a blank line."""

    def __init__(self) -> None:
        self._blocks: list[TextBlock] = []
        self._parts: list[str] = []
        self._heading: str | None = None
        self._page: int | None = None
        self.first_heading: str | None = None

    def heading(self, text: str) -> None:
        text = " ".join(text.split())
        if not text:
            return
        self._flush()
        self._heading = text
        if self.first_heading is None:
            self.first_heading = text

    def page(self, number: int) -> None:
        self._flush()
        self._page = number

    def add(self, text: str) -> None:
        text = text.strip()
        if text:
            self._parts.append(text)

    def blocks(self) -> list[TextBlock]:
        self._flush()
        return self._blocks

    def _flush(self) -> None:
        if self._parts:
            self._blocks.append(TextBlock(heading=self._heading, page=self._page, text="\n\n".join(self._parts)))
            self._parts = []
