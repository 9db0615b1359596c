"""Text normalisation and row cleaning: every raw row becomes a Document or a QuarantineRecord.

Nothing is dropped: ``len(rows) == len(documents) + len(quarantine)`` always holds, and each
quarantined row carries one reason from ``QuarantineReason`` plus a human-readable detail.

Field rules per format:

* ``beir``: ``_id`` (string or integer), ``title`` and ``text`` (strings, may be absent);
  the free-form ``metadata`` object keeps only its scalar values, and other top-level fields
  (the ACL Anthology's ``authors``, ``year``, ``venue``) that are scalars or lists of
  scalars become metadata too; nested ones are left out, as in ``metadata``. Quarantined as
  ``empty_text`` when both title and text are empty after cleaning; a title-only record
  uses its title as text so that every kept document has text to chunk.
* ``tool_catalog``: ``id``, ``name`` (required string), ``description``, ``keywords``
  (list of strings), ``tenant_id`` (optional), ``metadata`` and ``relations``. Unknown
  top-level fields are ignored. A tool whose cleaned description is empty is quarantined
  as ``empty_text``: a bare name gives retrieval almost nothing to match and usually means
  a broken export. Keywords are appended to the text as a final ``Keywords: a, b`` line so
  every retrieval strategy sees them, and kept in ``metadata["keywords"]``.
* ``document``: what the source kinds of ``ingest.sources`` write (``sources.records``):
  ``id``, ``title``, ``tenant_id`` and ``metadata`` as above, and either ``text`` or
  ``blocks`` (``heading``, ``page``, ``text``), which are cleaned one by one and kept as the
  document's ``structure``; a record with ``rejected`` (a reason and a detail: an encrypted
  PDF, a paper without an abstract) is quarantined with that reason. The text limit is
  ``DOCUMENT_MAX_TEXT_CHARS``: a file is a whole paper or book, not a record.

Every format: a top-level field ``embedding:<model>`` (``VECTOR_PREFIX``) holds a precomputed
dense vector of that model for the record (docs/sources.md#precomputed-vectors): a non-empty list of
finite numbers, not all zero; ``null`` is no vector. Anything else is ``invalid_vector``, and so is
a vector whose length differs from the most common length of its source's vectors for that model
(``clean_parsed``; a tie goes to the length seen first). Vectors are kept as given, by model name,
in ``Document.vectors``; whether one is used is decided at embedding time, by the configured model.

Metadata is flattened to filterable values: scalars stay (a ``year`` given as a digit
string becomes an integer, so year ranges work), lists of scalars become ``list[str]``,
one-level objects become ``parent.child`` keys and ``null`` values are dropped; deeper
nesting is ``invalid_metadata``. Keys that would collide with store payload fields or with
derived keys (``keywords``, ``relations.*``) get a ``meta_`` prefix.
"""

from __future__ import annotations

import json
import math
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import islice
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, TypeAdapter, ValidationError
from pylatexenc import latexwalker
from pylatexenc.latex2text import LatexNodes2Text, get_default_latex_context_db

from retrieval_assets.core.ingest.catalog import RawRow
from retrieval_assets.core.ingest.raw_table import with_texts
from retrieval_assets.core.ingest.reasons import QuarantineReason
from retrieval_assets.core.ingest.sources.records import VECTOR_PREFIX, TextBlock
from retrieval_assets.core.io.tables import (
    DOCUMENT_COLUMNS,
    RAW_ROW_COLUMNS,
    RECORD_BLOCK_ROWS,
    document_row,
    empty_frame,
    frame_to_documents,
)
from retrieval_assets.core.models import Document, MetadataValue, QuarantineRecord, TextSpan
from retrieval_assets.core.stores.base import REQUIRED_PAYLOAD_FIELDS

RAW_EXCERPT_CHARS = 2_000
DEFAULT_MAX_TEXT_CHARS = 200_000
# Files are whole papers, reports and books rather than records: about 300,000 words.
DOCUMENT_MAX_TEXT_CHARS = 2_000_000
# The formats cleaning reads: the catalog formats, and ``document``, the one every source kind in
# ``ingest.sources`` writes (``sources.records``).
RecordFormat = Literal["tool_catalog", "beir", "document"]


class CleaningStats(BaseModel):
    rows_in: int
    rows_kept: int
    rows_quarantined: int
    by_reason: dict[str, int]  # every reason, zero included, so the shape is stable

    @classmethod
    def combine(cls, parts: Iterable[CleaningStats]) -> CleaningStats:
        parts = list(parts)
        reasons = {reason.value: 0 for reason in QuarantineReason}
        for part in parts:
            for reason, count in part.by_reason.items():
                reasons[reason] = reasons.get(reason, 0) + count
        return cls(
            rows_in=sum(p.rows_in for p in parts),
            rows_kept=sum(p.rows_kept for p in parts),
            rows_quarantined=sum(p.rows_quarantined for p in parts),
            by_reason=reasons,
        )


class CleaningResult(BaseModel):
    documents: list[Document]
    quarantine: list[QuarantineRecord]
    stats: CleaningStats


# --------------------------------------------------------------------------- text cleaning

# A ``$$...$$`` display or a tight ``$x$`` inline span. The inline form must not start or end
# with a space nor be followed by a digit, so currency such as "$5 and $10" or "US$1.7 ... US$2"
# is not taken for math.
_MATH_SPAN = re.compile(r"\$\$(?P<display>.+?)\$\$|\$(?P<inline>[^\s$](?:[^$\n]*?[^\s$])?)\$(?!\d)", re.DOTALL)
_LATEX_COMMAND = re.compile(r"\\([A-Za-z]+|[^A-Za-z0-9\s])")
# Characters that are special to LaTeX but ordinary in prose; escaped outside math so that
# "50% of" is not cut at a comment sign. The trailing ``{}`` keeps the following space.
_PLAIN_SPECIALS = re.compile(r"(?<!\\)[%&$~]")
_PLAIN_ESCAPES = {"%": r"\%{}", "&": r"\&{}", "$": r"\${}", "~": r"\textasciitilde{}"}
# C0/C1 control characters that are not whitespace; whitespace controls (\t, \v, \f, \x1c-\x1f,
# \x85) are folded into single spaces by ``_INLINE_SPACE`` instead so words do not merge.
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")
_INLINE_SPACE = re.compile(r"[^\S\n]+")
_BLANK_RUNS = re.compile(r"\n{3,}")


@cache
def _known_latex_macros() -> frozenset[str]:
    """Macro names pylatexenc knows; an unknown ``\\word`` (a Windows path) is not LaTeX."""
    text_db = get_default_latex_context_db()
    walker_db = latexwalker.get_default_latex_context_db()
    names = {spec.macroname for spec in text_db.iter_macro_specs(text_db.category_list)}
    names.update(spec.macroname for spec in walker_db.iter_macro_specs(walker_db.category_list))
    return frozenset(names)


@cache
def _latex_converter() -> LatexNodes2Text:
    # Keep the spaces the author typed, after bare macros ("\alpha helix" -> "α helix") and
    # between constructs ("\emph{a} \emph{b}" -> "a b"); strict LaTeX would drop both.
    spaces = {
        "between-macro-and-chars": False,
        "between-latex-constructs": True,
        "after-comment": False,
        "in-equations": None,
    }
    return LatexNodes2Text(strict_latex_spaces=spaces)


def _looks_like_latex(text: str) -> bool:
    if _MATH_SPAN.search(text):
        return True
    known = _known_latex_macros()
    return any(match.group(1) in known for match in _LATEX_COMMAND.finditer(text))


def _escape_plain(segment: str) -> str:
    return _PLAIN_SPECIALS.sub(lambda m: _PLAIN_ESCAPES[m.group(0)], segment)


def _latex_to_text(text: str) -> str:
    """Render LaTeX markup as Unicode text; the original text when pylatexenc fails."""
    parts: list[str] = []
    position = 0
    for match in _MATH_SPAN.finditer(text):
        parts.append(_escape_plain(text[position : match.start()]))
        # Display math is rendered inline: pylatexenc would otherwise break the sentence
        # with line breaks around it.
        parts.append(f"${match.group('display') or match.group('inline')}$")
        position = match.end()
    parts.append(_escape_plain(text[position:]))
    try:
        return _latex_converter().latex_to_text("".join(parts))
    except Exception:  # noqa: BLE001 - pylatexenc raises assorted internal errors on hostile input
        return text


def clean_text(text: str) -> str:
    """Normalise text for indexing: LaTeX to Unicode, NFKC, no control characters, tidy spacing.

    NFKC runs after the LaTeX conversion so that its output (``\\textmu`` -> µ, ``~`` -> no-break
    space) is normalised as well.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if _looks_like_latex(text):
        text = _latex_to_text(text)
    text = unicodedata.normalize("NFKC", text)
    text = _CONTROL_CHARS.sub("", text)
    text = _INLINE_SPACE.sub(" ", text)
    text = "\n".join(line.strip() for line in text.split("\n"))
    return _BLANK_RUNS.sub("\n\n", text).strip()


# --------------------------------------------------------------------------- row cleaning

_SCALAR_TYPES = (str, int, float, bool)
_RESERVED_KEYS = frozenset(REQUIRED_PAYLOAD_FIELDS) | {"keywords"}
_RELATIONS_PREFIX = "relations."
_BEIR_FIELDS = frozenset({"_id", "title", "text", "metadata"})
# The largest finite float: a precomputed vector's integers must convert to floats.
_FLOAT_MAX = int(sys.float_info.max)
# Every store keeps integers as int64.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class RowRejected(Exception):
    """Raised while mapping a row; becomes a QuarantineRecord."""

    def __init__(self, reason: QuarantineReason, detail: str, doc_id: str | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.doc_id = doc_id


@dataclass
class _Parsed:
    """A row mapped to Document fields, before text cleaning."""

    doc_id: str
    tenant_id: str
    title: str
    body: str
    keywords: list[str] = field(default_factory=list)
    metadata: dict[str, MetadataValue] = field(default_factory=dict)
    # the text runs of a structured record; ``body`` is then unused
    blocks: list[TextBlock] | None = None
    # precomputed vectors by model name (``embedding:<model>`` fields)
    vectors: dict[str, list[float]] = field(default_factory=dict)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, _SCALAR_TYPES)


def _parse_id(record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RowRejected(QuarantineReason.MISSING_ID, f"field {key!r} is missing or empty")
    if isinstance(value, bool) or not isinstance(value, str | int):
        found = type(value).__name__
        raise RowRejected(QuarantineReason.INVALID_FIELD_TYPE, f"{key} must be a string or integer, got {found}")
    return str(value).strip()


def _optional_str(record: dict[str, Any], key: str, doc_id: str, *, required: bool = False) -> str:
    value = record.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        found = "missing" if value is None else type(value).__name__
        raise RowRejected(QuarantineReason.INVALID_FIELD_TYPE, f"{key} must be a string, got {found}", doc_id)
    return value


def _optional_object(record: dict[str, Any], key: str, doc_id: str) -> dict[str, Any]:
    value = record.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        found = type(value).__name__
        raise RowRejected(QuarantineReason.INVALID_FIELD_TYPE, f"{key} must be an object, got {found}", doc_id)
    return value


def _str_list(value: Any, what: str, doc_id: str, *, allow_int: bool = False) -> list[str]:
    allowed = (str, int) if allow_int else (str,)
    if value is None:
        return []
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, allowed) for v in value):
        kinds = "strings or integers" if allow_int else "strings"
        raise RowRejected(QuarantineReason.INVALID_FIELD_TYPE, f"{what} must be a list of {kinds}", doc_id)
    return [str(v) for v in value]


def _metadata_value(key: str, value: Any, doc_id: str) -> MetadataValue | None:
    """A flat metadata value, ``None`` for a null to drop; nested containers are rejected."""
    # ASCII digits only: "²".isdigit() is true but int("²") fails. The int64 check below applies too.
    if (
        key.rsplit(".", 1)[-1] == "year"
        and isinstance(value, str)
        and value.strip().isascii()
        and value.strip().isdigit()
    ):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and not _INT64_MIN <= value <= _INT64_MAX:
        raise RowRejected(QuarantineReason.INVALID_METADATA, f"metadata {key!r} is an integer beyond 64 bits", doc_id)
    if value is None or _is_scalar(value):
        return value
    if isinstance(value, list) and all(v is None or _is_scalar(v) for v in value):
        return [str(v) for v in value if v is not None]
    raise RowRejected(QuarantineReason.INVALID_METADATA, f"metadata {key!r} is nested deeper than one level", doc_id)


def _put_metadata(flat: dict[str, MetadataValue], key: str, value: MetadataValue | None, doc_id: str) -> None:
    if not key.strip() or key.endswith("."):
        raise RowRejected(QuarantineReason.INVALID_METADATA, f"metadata key {key!r} is empty", doc_id)
    if value is None:
        return
    if key in _RESERVED_KEYS or key.startswith(_RELATIONS_PREFIX):
        key = f"meta_{key}"
    if key in flat:
        detail = f"metadata key {key!r} occurs twice after flattening"
        raise RowRejected(QuarantineReason.INVALID_METADATA, detail, doc_id)
    flat[key] = value


def _flatten_metadata(metadata: dict[str, Any], doc_id: str) -> dict[str, MetadataValue]:
    flat: dict[str, MetadataValue] = {}
    for key, value in metadata.items():
        if isinstance(value, dict):
            for child, child_value in value.items():
                name = f"{key}.{child}"
                _put_metadata(flat, name, _metadata_value(name, child_value, doc_id), doc_id)
        else:
            _put_metadata(flat, key, _metadata_value(key, value, doc_id), doc_id)
    return flat


def _vector(model: str, value: Any, doc_id: str) -> list[float]:
    """A precomputed vector, checked: a non-empty list of finite numbers, not all zero."""

    def bad(why: str) -> RowRejected:
        return RowRejected(QuarantineReason.INVALID_VECTOR, f"{VECTOR_PREFIX}{model}: {why}", doc_id)

    if not isinstance(value, list):
        found = type(value).__name__
        raise bad(f"must be a list of numbers (in CSV, a JSON array such as [0.1, -0.2]), got {found}")
    if not value:
        raise bad("is an empty list")
    for position, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int | float):
            what = "null (NaN, an infinity or a missing value)" if item is None else type(item).__name__
            raise bad(f"item {position} is {what}, not a number")
        if isinstance(item, int) and not -_FLOAT_MAX <= item <= _FLOAT_MAX:
            raise bad(f"item {position} is an integer beyond any float, not a finite number")
        if not math.isfinite(item):
            raise bad(f"item {position} is {item}, not a finite number")
    vector = [float(item) for item in value]
    if not any(vector):
        raise bad(f"all {len(vector)} numbers are zero: a zero vector has no direction to search by")
    return vector


def _parse_vectors(record: dict[str, Any], doc_id: str) -> dict[str, list[float]]:
    vectors = {}
    for key, value in record.items():
        if not key.startswith(VECTOR_PREFIX) or value is None:
            continue
        model = key[len(VECTOR_PREFIX) :]
        if not model.strip():
            raise RowRejected(QuarantineReason.INVALID_VECTOR, f"field {key!r} names no model", doc_id)
        vectors[model] = _vector(model, value, doc_id)
    return vectors


def _parse_beir(record: dict[str, Any], tenant_id: str) -> _Parsed:
    doc_id = _parse_id(record, "_id")
    metadata = record.get("metadata")
    # BEIR's metadata is free-form (SciFact stores evidence there): keep only what can be filtered on.
    scalars = {k: v for k, v in metadata.items() if _is_scalar(v)} if isinstance(metadata, dict) else {}
    for key, value in record.items():
        flat_list = isinstance(value, list) and all(_is_scalar(v) for v in value)
        vector = key.startswith(VECTOR_PREFIX)
        if key not in _BEIR_FIELDS and key not in scalars and not vector and (_is_scalar(value) or flat_list):
            scalars[key] = value
    return _Parsed(
        doc_id=doc_id,
        tenant_id=tenant_id,
        title=_optional_str(record, "title", doc_id),
        body=_optional_str(record, "text", doc_id),
        metadata=_flatten_metadata(scalars, doc_id),
        vectors=_parse_vectors(record, doc_id),
    )


def _parse_tool(record: dict[str, Any], tenant_id: str) -> _Parsed:
    doc_id = _parse_id(record, "id")
    row_tenant = _optional_str(record, "tenant_id", doc_id).strip() or tenant_id
    metadata = _optional_object(record, "metadata", doc_id)
    relations = _optional_object(record, "relations", doc_id)

    flat = _flatten_metadata(metadata, doc_id)
    for relation, targets in relations.items():
        flat[f"{_RELATIONS_PREFIX}{relation}"] = _str_list(targets, f"relations.{relation}", doc_id, allow_int=True)
    return _Parsed(
        doc_id=doc_id,
        tenant_id=row_tenant,
        title=_optional_str(record, "name", doc_id, required=True),
        body=_optional_str(record, "description", doc_id),
        keywords=_str_list(record.get("keywords"), "keywords", doc_id),
        metadata=flat,
        vectors=_parse_vectors(record, doc_id),
    )


_BLOCKS = TypeAdapter(list[TextBlock])


def _parse_blocks(value: Any, doc_id: str) -> list[TextBlock]:
    if not isinstance(value, list) or not all(isinstance(block, dict) for block in value):
        raise RowRejected(QuarantineReason.INVALID_FIELD_TYPE, "blocks must be a list of objects", doc_id)
    try:
        return _BLOCKS.validate_python(value, strict=True)
    except ValidationError:
        detail = "each block needs text (a string), and heading (a string) and page (an integer) if given"
        raise RowRejected(QuarantineReason.INVALID_FIELD_TYPE, detail, doc_id) from None


def _parse_document(record: dict[str, Any], tenant_id: str) -> _Parsed:
    """A ``sources.records`` record: a document, or a rejection with its reason."""
    rejected = record.get("rejected")
    if rejected is not None:
        doc_id = record.get("id")
        doc_id = str(doc_id) if isinstance(doc_id, str | int) and not isinstance(doc_id, bool) else None
        reason = rejected.get("reason") if isinstance(rejected, dict) else None
        if not isinstance(reason, str) or reason not in {known.value for known in QuarantineReason}:
            raise RowRejected(QuarantineReason.INVALID_FIELD_TYPE, f"unknown rejection {rejected!r}", doc_id)
        raise RowRejected(QuarantineReason(reason), str(rejected.get("detail", "")), doc_id)
    doc_id = _parse_id(record, "id")
    blocks = _parse_blocks(record["blocks"], doc_id) if "blocks" in record else None
    return _Parsed(
        doc_id=doc_id,
        tenant_id=_optional_str(record, "tenant_id", doc_id).strip() or tenant_id,
        title=_optional_str(record, "title", doc_id),
        body="" if blocks is not None else _optional_str(record, "text", doc_id),
        metadata=_flatten_metadata(_optional_object(record, "metadata", doc_id), doc_id),
        blocks=blocks,
        vectors=_parse_vectors(record, doc_id),
    )


_PARSERS = {"beir": _parse_beir, "tool_catalog": _parse_tool, "document": _parse_document}


def _structured_text(blocks: list[TextBlock]) -> tuple[str, list[TextSpan]]:
    """Blocks cleaned one by one and joined by newlines, with the span each one covers; blocks
    left empty by cleaning are dropped. A section's heading line opens its first block, so that
    heading words are searchable like every other word."""
    texts, spans, previous = [], [], None
    for block in blocks:
        heading = clean_text(block.heading) if block.heading else None
        text = clean_text(block.text)
        if not text:
            continue
        if heading and heading != previous:
            text = f"{heading}\n{text}"
        previous = heading
        texts.append(text)
        spans.append(TextSpan(heading=heading, page=block.page, length=len(text)))
    return "\n".join(texts), spans


def _to_document(parsed: _Parsed, fmt: RecordFormat, max_text_chars: int) -> Document:
    if parsed.blocks is not None:
        size = sum(len(block.text) for block in parsed.blocks)
        if size > max_text_chars:
            detail = f"text has {size:,} chars, limit {max_text_chars:,}"
            raise RowRejected(QuarantineReason.TEXT_TOO_LONG, detail, parsed.doc_id)
        body, structure = _structured_text(parsed.blocks)
        title = clean_text(parsed.title)
        if not body:
            raise RowRejected(QuarantineReason.EMPTY_TEXT, "no text left after cleaning", parsed.doc_id)
        return Document(
            doc_id=parsed.doc_id,
            title=title,
            text=body,
            tenant_id=parsed.tenant_id,
            metadata=parsed.metadata,
            structure=structure,
            vectors=parsed.vectors,
        )
    if len(parsed.body) > max_text_chars:
        # Checked before cleaning so a pathological row costs nothing to reject.
        detail = f"text has {len(parsed.body):,} chars, limit {max_text_chars:,}"
        raise RowRejected(QuarantineReason.TEXT_TOO_LONG, detail, parsed.doc_id)
    title = clean_text(parsed.title)
    body = clean_text(parsed.body)
    if not body and (fmt == "tool_catalog" or not title):
        what = "description" if fmt == "tool_catalog" else "title and text"
        raise RowRejected(QuarantineReason.EMPTY_TEXT, f"{what} empty after cleaning", parsed.doc_id)
    # A title-only BEIR record keeps its title as text: every kept document has text to chunk.
    body = body or title

    metadata = dict(parsed.metadata)
    keywords = list(dict.fromkeys(k for k in map(clean_text, parsed.keywords) if k))
    if keywords:
        body = f"{body}\nKeywords: {', '.join(keywords)}"
        metadata["keywords"] = keywords
    return Document(
        doc_id=parsed.doc_id,
        title=title,
        text=body,
        tenant_id=parsed.tenant_id,
        metadata=metadata,
        vectors=parsed.vectors,
    )


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def parse_row(row: RawRow, fmt: RecordFormat, tenant_id: str, max_text_chars: int) -> Document:
    if row.utf8_error:
        raise RowRejected(QuarantineReason.INVALID_UTF8, "line is not valid UTF-8 (undecodable bytes shown as U+FFFD)")
    if not row.raw.strip():
        raise RowRejected(QuarantineReason.BLANK_LINE, "blank line")
    try:
        record = json.loads(row.raw, parse_constant=_reject_constant)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise RowRejected(QuarantineReason.MALFORMED_JSON, str(exc)) from None
    except ValueError as exc:  # NaN / Infinity: Python accepts them, JSON and the stores do not
        raise RowRejected(QuarantineReason.MALFORMED_JSON, str(exc)) from None
    try:
        # A "\ud800" escape parses into a lone surrogate that no UTF-8 writer (Parquet) can store.
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RowRejected(
            QuarantineReason.INVALID_UTF8, f"unpaired surrogate escape in the record ({exc.reason})"
        ) from None
    if not isinstance(record, dict):
        raise RowRejected(QuarantineReason.NOT_AN_OBJECT, f"expected a JSON object, got {type(record).__name__}")
    return _to_document(_PARSERS[fmt](record, tenant_id), fmt, max_text_chars)


def clean_one(
    row: RawRow, fmt: RecordFormat, tenant_id: str = "default", max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
) -> Document | QuarantineRecord:
    """One row alone, as ``clean_rows`` would clean it, without building frames: a posted
    record costs about 0.3 ms this way against 10 ms through ``clean_rows``."""
    try:
        return parse_row(row, fmt, tenant_id, max_text_chars)
    except RowRejected as rejected:
        return QuarantineRecord(
            source=row.source,
            line_number=row.line_number,
            doc_id=rejected.doc_id,
            reason=rejected.reason.value,
            detail=rejected.detail,
            raw=row.raw[:RAW_EXCERPT_CHARS],
        )


# A row's parse as a flat record: the document's columns (metadata as JSON), or the id and why
# the row was rejected. A catalog is cleaned as a frame of these, one per raw row, so that the
# memo (``ingest.memo.ParsedRows``) can hand back the previous build's records without
# building a Document per row.
PARSE_COLUMNS: dict[str, str] = {**DOCUMENT_COLUMNS, "reason": "string", "detail": "string"}


def parse_record(row: RawRow, fmt: RecordFormat, tenant_id: str, max_text_chars: int) -> dict[str, Any]:
    record = dict.fromkeys(PARSE_COLUMNS)
    try:
        doc = parse_row(row, fmt, tenant_id, max_text_chars)
    except RowRejected as rejected:
        return record | {"doc_id": rejected.doc_id, "reason": rejected.reason.value, "detail": rejected.detail}
    return record | document_row(doc)


def parse_rows(
    rows: Iterable[RawRow], fmt: RecordFormat, tenant_id: str = "default", max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
) -> pd.DataFrame:
    """One ``PARSE_COLUMNS`` record per row, in row order."""
    if fmt not in _PARSERS:
        raise ValueError(f"unknown catalog format {fmt!r}; expected one of {sorted(_PARSERS)}")
    remaining = iter(rows)
    frames = []
    # A block at a time, so that only one block's records exist as dicts at once.
    while block := list(islice(remaining, RECORD_BLOCK_ROWS)):
        records = [parse_record(row, fmt, tenant_id, max_text_chars) for row in block]
        frames.append(pd.DataFrame(records, columns=list(PARSE_COLUMNS)).astype(PARSE_COLUMNS))
    if len(frames) == 1:
        return frames[0]
    return pd.concat(frames, ignore_index=True) if frames else empty_frame(PARSE_COLUMNS)


@dataclass(frozen=True)
class CleanedFrame:
    """``CleaningResult`` with the documents as a ``DOCUMENT_COLUMNS`` frame."""

    documents: pd.DataFrame
    quarantine: list[QuarantineRecord]
    stats: CleaningStats

    def result(self) -> CleaningResult:
        """As Documents, for callers that work on a few of them."""
        return CleaningResult(
            documents=frame_to_documents(self.documents), quarantine=self.quarantine, stats=self.stats
        )


def _with_consistent_vectors(parsed: pd.DataFrame) -> pd.DataFrame:
    """``parse_rows`` records with each vector whose length is not the most common length of the
    source's vectors for its model (a tie: the length seen first) rejected as ``invalid_vector``."""
    carrying = np.flatnonzero((parsed["reason"].isna() & parsed["vectors"].notna()).to_numpy(dtype=bool)).tolist()
    if not carrying:
        return parsed
    lengths: dict[int, dict[str, int]] = {
        position: {model: len(vector) for model, vector in json.loads(parsed.at[position, "vectors"]).items()}
        for position in carrying
    }
    counts: dict[str, Counter[int]] = {}
    for by_model in lengths.values():
        for model, length in by_model.items():
            counts.setdefault(model, Counter())[length] += 1
    usual = {model: counter.most_common(1)[0][0] for model, counter in counts.items()}
    bad = {
        position: next(model for model, length in by_model.items() if length != usual[model])
        for position, by_model in lengths.items()
        if any(length != usual[model] for model, length in by_model.items())
    }
    if not bad:
        return parsed
    parsed = parsed.copy()
    for position, model in bad.items():
        parsed.at[position, "reason"] = QuarantineReason.INVALID_VECTOR.value
        parsed.at[position, "detail"] = (
            f"{VECTOR_PREFIX}{model}: {lengths[position][model]} numbers, but {counts[model][usual[model]]} of "
            f"this source's vectors for {model} have {usual[model]}"
        )
    return parsed


def clean_parsed(
    rows: pd.DataFrame | Sequence[RawRow],
    parsed: pd.DataFrame,
    texts: Callable[[np.ndarray], list[str]] | None = None,
    raw_texts: Callable[[np.ndarray], list[str]] | None = None,
) -> CleanedFrame:
    """Documents and quarantine records of raw rows from their parses (``parse_rows``, row for
    row). The rows are a ``RAW_ROW_COLUMNS`` frame or the ``RawRow``s themselves, which may hold
    text no Arrow string can (a lone surrogate in a document posted through the API). The first
    kept row wins an id within its tenant; later rows with that id and tenant are ``duplicate_id``
    (ids live in a tenant's namespace: another tenant's row may hold the same id).

    ``parsed`` may hold only some record columns (a memo's ``LIGHT_COLUMNS`` and a ``record``
    column); the documents then have those columns, and ``texts`` gives the text of parses by
    position, for a duplicate's detail. A frame of rows may lack their text: ``raw_texts`` gives
    the quarantined rows' text by position."""
    if len(rows) != len(parsed):
        raise ValueError(f"{len(rows)} raw rows but {len(parsed)} parses")
    if isinstance(rows, pd.DataFrame):
        rows = rows.reset_index(drop=True)
    parsed = _with_consistent_vectors(parsed.reset_index(drop=True))

    def raw_rows(positions: np.ndarray) -> list[RawRow]:
        if not isinstance(rows, pd.DataFrame):
            return [rows[position] for position in positions.tolist()]
        taken = with_texts(rows.iloc[positions], positions, raw_texts)
        return [RawRow(**record) for record in taken[list(RAW_ROW_COLUMNS)].to_dict("records")]

    rejected = parsed["reason"].notna().to_numpy(dtype=bool)
    duplicate = np.zeros(len(parsed), dtype=bool)
    identity = ["tenant_id", "doc_id"]
    duplicate[~rejected] = parsed.loc[~rejected, identity].duplicated(keep="first").to_numpy(dtype=bool)
    kept = ~rejected & ~duplicate
    # (tenant_id, doc_id) -> (line kept from, text), for duplicate details.
    first = {}
    text_of = texts or (lambda positions: parsed["text"].iloc[positions].tolist())
    text: dict[int, str] = {}
    if duplicate.any():
        wanted = set(parsed.loc[duplicate, "doc_id"])
        firsts = np.flatnonzero(kept & parsed["doc_id"].isin(wanted).to_numpy(dtype=bool))
        both = np.r_[firsts, np.flatnonzero(duplicate)]
        text = dict(zip(both.tolist(), text_of(both), strict=True))
        for position in firsts.tolist():
            key = (parsed.at[position, "tenant_id"], parsed.at[position, "doc_id"])
            first[key] = (_line_number(rows, position), text[position])
    quarantine = []
    left_out = np.flatnonzero(~kept)
    for position, row in zip(left_out.tolist(), raw_rows(left_out), strict=True):
        record = parsed.iloc[position]
        if rejected[position]:
            reason, detail = record["reason"], record["detail"]
        else:
            line, first_text = first[record["tenant_id"], record["doc_id"]]
            reason = QuarantineReason.DUPLICATE_ID.value
            same = "identical" if first_text == text[position] else "different"
            detail = f"id already kept from line {line}; text is {same}"
        quarantine.append(
            QuarantineRecord(
                source=row.source,
                line_number=row.line_number,
                doc_id=None if pd.isna(record["doc_id"]) else record["doc_id"],
                reason=reason,
                detail=detail,
                raw=row.raw[:RAW_EXCERPT_CHARS],
            )
        )
    counts = Counter(record.reason for record in quarantine)
    stats = CleaningStats(
        rows_in=len(rows),
        rows_kept=int(kept.sum()),
        rows_quarantined=len(quarantine),
        by_reason={reason.value: counts.get(reason.value, 0) for reason in QuarantineReason},
    )
    columns = [name for name in parsed.columns if name in DOCUMENT_COLUMNS or name not in PARSE_COLUMNS]
    typed = {name: DOCUMENT_COLUMNS[name] for name in columns if name in DOCUMENT_COLUMNS}
    documents = parsed.loc[kept, columns].reset_index(drop=True).astype(typed)
    return CleanedFrame(documents=documents, quarantine=quarantine, stats=stats)


def _line_number(rows: pd.DataFrame | Sequence[RawRow], position: int) -> int:
    if isinstance(rows, pd.DataFrame):
        return int(rows["line_number"].iat[position])
    return rows[position].line_number


def clean_rows(
    rows: Iterable[RawRow],
    fmt: RecordFormat,
    tenant_id: str = "default",
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
) -> CleaningResult:
    """Turn raw rows into Documents, quarantining each row that cannot be used and why
    (``clean_parsed``)."""
    rows = list(rows)
    return clean_parsed(rows, parse_rows(rows, fmt, tenant_id, max_text_chars)).result()
