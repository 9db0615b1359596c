"""Plain text files: strict UTF-8 (a byte-order mark removed), else ``invalid_utf8``; NUL bytes
mark a binary file and are ``invalid_utf8`` too. The whole file is one block without a heading;
the title is the first non-empty line when it is short (at most 15 words), else None."""

from __future__ import annotations

from retrieval_assets.core.ingest.sources.formats.base import BlockCollector, ExtractedFile, decode_utf8, short_line

TITLE_MAX_WORDS = 15


def extract_text(data: bytes) -> ExtractedFile:
    text = decode_utf8(data).replace("\r\n", "\n").replace("\r", "\n")
    first_line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    collector = BlockCollector()
    collector.add(text)
    return ExtractedFile(
        format="text",
        title=first_line if short_line(first_line, TITLE_MAX_WORDS) else None,
        blocks=collector.blocks(),
    )
