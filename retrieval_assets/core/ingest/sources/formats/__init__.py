"""Text extractors for the ``files`` source kind, one module per format, chosen by extension.

``extract(path, data)`` turns a file's bytes into an ``ExtractedFile`` (title, blocks of text under
their headings, page count, the format's own metadata) or raises ``ExtractionFailed`` with the
quarantine reason. Extensions (case-insensitive): ``.pdf``; ``.html``, ``.htm``; ``.md``,
``.markdown``; ``.docx``; ``.txt``, ``.text``, ``.rst`` (read as plain text). Any other extension is
``unsupported_format``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from retrieval_assets.core.ingest.reasons import QuarantineReason
from retrieval_assets.core.ingest.sources.formats.base import ExtractedFile, MetadataScalar
from retrieval_assets.core.ingest.sources.formats.docx import extract_docx
from retrieval_assets.core.ingest.sources.formats.html import extract_html
from retrieval_assets.core.ingest.sources.formats.markdown import extract_markdown
from retrieval_assets.core.ingest.sources.formats.pdf import extract_pdf
from retrieval_assets.core.ingest.sources.formats.text import extract_text
from retrieval_assets.core.ingest.sources.records import ExtractionFailed

__all__ = ["EXTENSIONS", "ExtractedFile", "MetadataScalar", "extract", "format_of"]

# extension -> (format, extractor)
EXTENSIONS: dict[str, tuple[str, Callable[[bytes], ExtractedFile]]] = {
    ".pdf": ("pdf", extract_pdf),
    ".html": ("html", extract_html),
    ".htm": ("html", extract_html),
    ".md": ("markdown", extract_markdown),
    ".markdown": ("markdown", extract_markdown),
    ".docx": ("docx", extract_docx),
    ".txt": ("text", extract_text),
    ".text": ("text", extract_text),
    ".rst": ("text", extract_text),
}


def format_of(path: Path) -> str:
    """The format that reads ``path``, from its extension; ``unsupported_format`` for any other."""
    suffix = path.suffix.lower()
    if suffix not in EXTENSIONS:
        supported = ", ".join(EXTENSIONS)
        named = f"extension {suffix!r}" if suffix else "no extension"
        raise ExtractionFailed(QuarantineReason.UNSUPPORTED_FORMAT, f"{named}; supported: {supported}")
    return EXTENSIONS[suffix][0]


def extract(path: Path, data: bytes) -> ExtractedFile:
    """The text of the file at ``path`` (its extension chooses the extractor) from its ``data``."""
    format_of(path)
    return EXTENSIONS[path.suffix.lower()][1](data)
