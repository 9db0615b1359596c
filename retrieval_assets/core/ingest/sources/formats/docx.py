"""Word ``.docx`` files, read with python-docx in body order (paragraphs and tables interleaved).

* Headings: paragraphs styled "Title" or "Heading 1" .. "Heading 9"; each block carries the nearest
  heading above it. Table rows become lines of cell texts joined by `` | `` (a merged cell, which
  python-docx repeats once per spanned column, is written once). Page headers and footers are
  running text and are not read.
* Title: the first "Title" paragraph, else the core properties' title, else the first heading.
  ``author`` and ``subject`` from the core properties go to metadata.
* Errors: an OLE compound file (``D0 CF 11 E0``) holding an ``EncryptionInfo`` stream is a
  password-protected Office file, ``encrypted_file``; any other OLE file is a legacy binary Word
  document, ``unsupported_format``; a file python-docx cannot open (not a zip, no Word part,
  broken XML) is ``corrupt_file``.
"""

from __future__ import annotations

import io
import re
import zipfile

import docx
from docx.opc.exceptions import PackageNotFoundError
from docx.table import Table
from lxml import etree

from retrieval_assets.core.ingest.reasons import QuarantineReason
from retrieval_assets.core.ingest.sources.formats.base import BlockCollector, ExtractedFile, MetadataScalar
from retrieval_assets.core.ingest.sources.records import ExtractionFailed

_OLE_MAGIC = bytes.fromhex("D0CF11E0A1B11AE1")
_ENCRYPTION_STREAM = "EncryptionInfo".encode("utf-16-le")  # OLE directory entries are UTF-16 names
_HEADING_STYLE = re.compile(r"(?:Title|Heading [1-9])", re.IGNORECASE)


def extract_docx(data: bytes) -> ExtractedFile:
    if data.startswith(_OLE_MAGIC):
        if _ENCRYPTION_STREAM in data:
            raise ExtractionFailed(QuarantineReason.ENCRYPTED_FILE, "a password-protected Office file")
        raise ExtractionFailed(
            QuarantineReason.UNSUPPORTED_FORMAT, "a legacy binary Word (.doc) file under a .docx name"
        )
    try:
        document = docx.Document(io.BytesIO(data))
    except (zipfile.BadZipFile, PackageNotFoundError, KeyError, ValueError, etree.XMLSyntaxError) as exc:
        raise ExtractionFailed(QuarantineReason.CORRUPT_FILE, f"{type(exc).__name__}: {exc}") from None
    collector = BlockCollector()
    title_paragraph: str | None = None
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            for row in item.rows:
                cells: list[str] = []
                for cell in row.cells:
                    text = " ".join(cell.text.split())
                    if not cells or cells[-1] != text:
                        cells.append(text)
                collector.add(" | ".join(cell for cell in cells if cell))
            continue
        style = item.style.name if item.style is not None else ""
        if style and _HEADING_STYLE.fullmatch(style):
            collector.heading(item.text)
            if title_paragraph is None and style.lower() == "title":
                title_paragraph = " ".join(item.text.split()) or None
        else:
            collector.add(item.text)
    properties = document.core_properties
    metadata: dict[str, MetadataScalar] = {
        key: value.strip()
        for key, value in (("author", properties.author), ("subject", properties.subject))
        if value and value.strip()
    }
    return ExtractedFile(
        format="docx",
        title=title_paragraph or (properties.title or "").strip() or collector.first_heading,
        blocks=collector.blocks(),
        metadata=metadata,
    )
