"""The ``document`` catalog format: what every source kind hands to cleaning.

A source reads each file, table row or paper into one ``RawRow`` whose ``raw`` is a JSON object,
either a document::

    {"id": "notes/a.md", "title": "...", "blocks": [{"heading": "Methods", "page": 3, "text": "..."}],
     "tenant_id": "...", "metadata": {"format": "markdown", "bytes": 1234}}

(``text`` instead of ``blocks`` for sources without structure; a table row's precomputed vectors
as ``"embedding:<model>": [...]`` fields, as in a tool catalog), or a rejection::

    {"id": "scans/b.pdf", "rejected": {"reason": "no_text_layer", "detail": "12 pages, no text on any"}}

which cleaning quarantines with that reason. One row per input item either way, so
``items in == kept + quarantined`` holds for every kind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

from retrieval_assets.core.ingest.catalog import RawRow
from retrieval_assets.core.ingest.reasons import QuarantineReason

# A record's field (a table's column) named ``embedding:<model>`` holds that model's precomputed
# vector of the record. Everything after the first colon is the model name, slashes and dots
# included (``embedding:BAAI/bge-small-en-v1.5``); Hugging Face names hold no colon.
VECTOR_PREFIX = "embedding:"


class TextBlock(BaseModel):
    """A run of extracted text under one heading and on one page."""

    model_config = ConfigDict(frozen=True)

    heading: str | None = None  # the nearest heading above the text; None before the first one
    page: int | None = None  # 1-based page, for paged formats (PDF)
    text: str


class ExtractionFailed(Exception):
    """A file or row that cannot become a document; it is quarantined with ``reason``."""

    def __init__(self, reason: QuarantineReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def document_record(
    doc_id: str,
    title: str,
    *,
    text: str | None = None,
    blocks: list[TextBlock] | None = None,
    tenant_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    vectors: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A document record: ``text`` or ``blocks`` (structured text), not both. ``vectors`` are
    field name (``embedding:<model>``) to value, passed on unchecked for cleaning to judge."""
    if (text is None) == (blocks is None):
        raise ValueError("a document record has text or blocks, not both or neither")
    record: dict[str, Any] = {"id": doc_id, "title": title}
    if blocks is not None:
        record["blocks"] = [block.model_dump(exclude_none=True) for block in blocks]
    else:
        record["text"] = text
    if tenant_id is not None:
        record["tenant_id"] = tenant_id
    if metadata:
        record["metadata"] = metadata
    if vectors:
        record.update(vectors)
    return record


def rejected_record(doc_id: str | None, reason: QuarantineReason, detail: str) -> dict[str, Any]:
    return {"id": doc_id, "rejected": {"reason": reason.value, "detail": detail}}


def record_row(source: str, number: int, record: dict[str, Any]) -> RawRow:
    """The raw row of a record: ``source`` names the folder, table or data directory, ``number``
    the item's 1-based position in it."""
    try:
        raw = orjson.dumps(record).decode()  # 5x json.dumps: a third of a table's read time
    except TypeError:  # a lone surrogate, which orjson refuses: json writes it, cleaning quarantines it
        raw = json.dumps(record, ensure_ascii=False)
    return RawRow(source=source, line_number=number, raw=raw)


class SourceRead:
    """A source's rows, streamed, and what reading them took: ``stats`` (numbers for the
    source's materialization: files or rows seen, bytes read, extraction seconds, reused from the
    last build, per format) is complete once ``rows`` is exhausted."""

    def __init__(self, rows: Iterator[RawRow], stats: dict[str, float] | None = None) -> None:
        self.rows = rows
        self.stats: dict[str, float] = stats if stats is not None else {}
