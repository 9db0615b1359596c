"""Ingest steps: read every catalog line, clean it (or quarantine it with a reason), apply the
document inbox's upserts and deletes, chunk.

Each step is a plain function over tables so that any asset can be re-materialized alone from
the Parquet output of the one before it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from retrieval_assets.core.embed.cache import content_hash
from retrieval_assets.core.ingest.catalog import (
    CatalogFormat,
    CatalogSource,
    RawRow,
    catalog_file,
    read_line_blocks,
)
from retrieval_assets.core.ingest.chunking import make_chunker
from retrieval_assets.core.ingest.cleaning import (
    DEFAULT_MAX_TEXT_CHARS,
    DOCUMENT_MAX_TEXT_CHARS,
    RAW_EXCERPT_CHARS,
    CleanedFrame,
    CleaningResult,
    CleaningStats,
    QuarantineReason,
    RecordFormat,
    clean_one,
    clean_parsed,
    parse_rows,
)
from retrieval_assets.core.ingest.inbox import (
    DocumentInbox,
    InboxEntry,
    InboxOperation,
    InboxOutcome,
)
from retrieval_assets.core.ingest.memo import (
    BLANK_TEXT,
    DOCUMENT_KEY,
    KEY,
    RECORD,
    ParsedRows,
    chunker_tag,
    document_keys,
    documents_at,
    stored_document_keys,
)
from retrieval_assets.core.ingest.raw_table import FrameRows, LineRows, SourceRows, with_texts
from retrieval_assets.core.ingest.sources.kinds import DOCUMENT_KINDS, read_source
from retrieval_assets.core.io.parted import PartedTable, TableWrite, extended_or_whole
from retrieval_assets.core.io.tables import (
    CHUNK_COLUMNS,
    RECORD_BLOCK_ROWS,
    ROW_HASH,
    chunk_row_hashes,
    chunks_to_frame,
    documents_to_frame,
    frame_to_documents,
    frame_to_raw_rows,
    raw_rows_to_frame,
    take_rows,
)
from retrieval_assets.core.models import Chunk, Document, QuarantineRecord
from retrieval_assets.core.settings import ChunkingSettings


def source_key(source: CatalogSource) -> str:
    """The ``source`` column of a source's raw rows: its file, folder or the inbox directory
    (with its include globs where they are not the default: two single-file sources of one folder
    are two sources)."""
    if source.format == "inbox":
        return source.path
    if source.format in ("tool_catalog", "beir"):
        return str(catalog_file(source.path, source.format))
    key = str(Path(source.path))
    default = CatalogSource.model_fields["include"].default
    return key if source.format != "files" or source.include == default else f"{key}::{','.join(source.include)}"


def _inbox_rows(source: CatalogSource) -> Iterator[RawRow]:
    # One row per inbox entry, archived ones first: the order in which a build applies them.
    entries = DocumentInbox(Path(source.path)).snapshot()
    fields = set(InboxEntry.model_fields)
    return (
        RawRow(source=source.path, line_number=n, raw=json.dumps(entry.model_dump(mode="json", include=fields)))
        for n, entry in enumerate(entries, start=1)
    )


def read_source_rows(source: CatalogSource, cache_dir: Path | None = None) -> tuple[SourceRows, dict[str, float]]:
    """One source's raw rows, keyed by ``source_key``, and what reading them took
    (``SourceRead.stats``). A JSON Lines file's rows are its lines as read, their texts not yet
    made (``raw_table.LineRows``)."""
    if source.format == "inbox":
        frame = raw_rows_to_frame(_inbox_rows(source))
        return FrameRows(frame), {"rows": len(frame)}
    if source.format in ("tool_catalog", "beir"):
        started, path = time.perf_counter(), catalog_file(source.path, source.format)
        rows = LineRows(source_key(source), list(read_line_blocks(path)))
        return rows, {"rows": len(rows), "read_seconds": round(time.perf_counter() - started, 3)}
    read = read_source(source, cache_dir)
    frame = raw_rows_to_frame(read.rows)
    frame = frame.assign(source=pd.Series(source_key(source), index=frame.index, dtype="string"))
    return FrameRows(frame), dict(read.stats)


def read_raw_catalog(source: CatalogSource, cache_dir: Path | None = None) -> pd.DataFrame:
    return read_source_rows(source, cache_dir)[0].frame()


def read_raw_sources(
    sources: Mapping[str, CatalogSource], cache_dir: Path | None = None
) -> tuple[list[SourceRows], dict[str, dict[str, float]]]:
    """Every source's rows, and each source's reading stats by name. With ``cache_dir``, folders
    of files re-read only changed files."""
    read, stats = [], {}
    for name, source in sources.items():
        rows, stats[name] = read_source_rows(source, cache_dir)
        read.append(rows)
    return read, stats


def read_raw_catalogs(
    sources: Mapping[str, CatalogSource], cache_dir: Path | None = None
) -> tuple[pd.DataFrame, dict[str, dict[str, float]]]:
    """Every row of every source as one frame (the ``source`` column says which), and each
    source's reading stats by name."""
    read, stats = read_raw_sources(sources, cache_dir)
    frames = [rows.frame() for rows in read]
    return (pd.concat(frames, ignore_index=True) if frames else raw_rows_to_frame([])), stats


def record_format(source: CatalogSource) -> RecordFormat:
    """The format cleaning reads a (non-inbox) source's rows in."""
    if source.format in DOCUMENT_KINDS:
        return "document"
    return cast(CatalogFormat, source.format)


@dataclass
class CleanedCatalogs:
    """The documents a build indexes (a ``DOCUMENT_COLUMNS`` frame): every catalog cleaned, then
    the inbox applied.

    ``rows_in == len(documents) + len(quarantine) + superseded + tombstones``: a catalog or inbox
    document replaced by a later upsert, or removed by a delete, is ``superseded``; each delete
    entry is a ``tombstone``. ``receipts`` says what became of each inbox entry."""

    documents: pd.DataFrame
    quarantine: list[QuarantineRecord]
    stats: CleaningStats
    receipts: list[dict[str, Any]] = field(default_factory=list)
    superseded: int = 0
    tombstones: int = 0
    # Each catalog source's own cleaning stats, by ``source_key`` (the inbox's are in ``receipts``).
    by_source: dict[str, CleaningStats] = field(default_factory=dict)
    # With a memo: the cleaned documents table to store (``ParsedRows.documents``).
    table: TableWrite | None = None


def _stored(cleaned: CleanedCatalogs, memo: ParsedRows | None) -> CleanedCatalogs:
    """``cleaned`` with the table of its documents, once the memo's records are saved."""
    if memo is None:
        return cleaned
    memo.save()
    return replace(cleaned, table=memo.documents(cleaned.documents))


def _clean_source(
    raw: pd.DataFrame,
    fmt: RecordFormat,
    tenant_id: str,
    memo: ParsedRows | None,
    raw_texts: Callable[[np.ndarray], list[str]] | None = None,
) -> CleanedFrame:
    """A catalog (not the inbox) source's rows cleaned with its format and tenant; with a
    ``memo``, rows parsed by the last build are not parsed again. Rows without their text get it
    from ``raw_texts``, by position in ``raw``, where they need it."""
    limit = DOCUMENT_MAX_TEXT_CHARS if fmt == "document" else DEFAULT_MAX_TEXT_CHARS
    if memo is None:
        raw = with_texts(raw, np.arange(len(raw)), raw_texts)
        return clean_parsed(raw, parse_rows(frame_to_raw_rows(raw), fmt, tenant_id, limit))
    parsed = memo.parse(raw, fmt, tenant_id, limit, raw_texts)
    records = parsed[RECORD].to_numpy()
    return clean_parsed(raw, parsed, lambda positions: memo.texts(records[positions]), raw_texts)


def clean_catalog(raw: pd.DataFrame, source: CatalogSource) -> CleaningResult:
    """One source's documents; for the inbox, the documents its entries leave (upserts applied,
    deletes honoured)."""
    if source.format == "inbox":
        applied = apply_inbox(documents_to_frame([]), frame_to_raw_rows(raw))
        return CleanedFrame(applied.documents, applied.quarantine, applied.stats).result()
    return _clean_source(raw, record_format(source), source.tenant_id, None).result()


def rows_of_source(raw: pd.DataFrame, key: str) -> pd.DataFrame:
    """The raw rows whose ``source`` is ``key``: a slice of ``raw``, not a copy, where they are
    consecutive, as ``read_raw_catalogs`` puts them (copying 90 % of 200k ACL rows added 457 MB)."""
    held = np.flatnonzero((raw["source"] == key).to_numpy(dtype=bool))
    if len(held) and held[-1] - held[0] + 1 == len(held):
        return raw.iloc[held[0] : held[-1] + 1]
    return raw.iloc[held]


def clean_catalogs(
    raw: pd.DataFrame,
    sources: Sequence[CatalogSource],
    memo: ParsedRows | None = None,
    raw_texts: Callable[[np.ndarray], list[str]] | None = None,
) -> CleanedCatalogs:
    """Each catalog's rows cleaned with its own format and tenant, the results concatenated (an id
    an earlier catalog of the same tenant holds is ``duplicate_id``), then the inbox's entries
    applied on top, in the order they were accepted.

    With a ``memo``, the documents are each one's id, tenant and record in the memo (``ParsedRows``),
    and ``table`` is the cleaned documents table to store, made of those records. ``raw`` may
    hold the rows' digests instead of their text (``raw_table.light_rows``): ``raw_texts`` reads
    the text of the rows that need it, by position in ``raw``."""
    raw = raw.reset_index(drop=True)
    results, inbox_rows, keys = [], [], []
    for source in sources:
        key = source_key(source)
        rows = rows_of_source(raw, key)
        # Positions in the source's rows, as the text of the whole table's rows.
        texts = _texts_at(rows.index.to_numpy(), raw_texts)
        if source.format == "inbox":
            inbox_rows.append(with_texts(rows, np.arange(len(rows)), texts))
        else:
            results.append(_clean_source(rows, record_format(source), source.tenant_id, memo, texts))
            keys.append(key)
    claimed = sum(r.stats.rows_in for r in results) + sum(len(rows) for rows in inbox_rows)
    if len(raw) != claimed:
        raise ValueError(f"{len(raw) - claimed} raw rows come from no configured source: re-materialize raw_catalog")
    results = _without_repeated_ids(results, keys)
    by_source = {key: result.stats for key, result in zip(keys, results, strict=True)}
    frames = [r.documents for r in results]
    none = documents_to_frame([]) if memo is None else memo.add(documents_to_frame([]))
    documents = pd.concat(frames, ignore_index=True) if frames else none
    quarantine = [q for r in results for q in r.quarantine]
    stats = CleaningStats.combine(r.stats for r in results)
    if not inbox_rows:
        return _stored(CleanedCatalogs(documents, quarantine, stats, by_source=by_source), memo)
    applied = apply_inbox(documents, (row for rows in inbox_rows for row in frame_to_raw_rows(rows)), memo)
    cleaned = CleanedCatalogs(
        applied.documents,
        quarantine + applied.quarantine,
        CleaningStats.combine([stats, applied.stats]),
        applied.receipts,
        applied.superseded,
        applied.tombstones,
        by_source,
    )
    return _stored(cleaned, memo)


def _texts_at(
    at: np.ndarray, raw_texts: Callable[[np.ndarray], list[str]] | None
) -> Callable[[np.ndarray], list[str]] | None:
    """``raw_texts`` for rows that lie at ``at`` in what it reads."""
    if raw_texts is None:
        return None
    return lambda positions: raw_texts(at[positions])


def _without_repeated_ids(results: Sequence[CleanedFrame], keys: Sequence[str]) -> list[CleanedFrame]:
    """Each source's cleaning (``keys``: their ``source_key``s, in order) without the documents an
    earlier source of the same tenant holds by id: those are ``duplicate_id``, as a repeated id
    within one catalog is. Ids live in a tenant's namespace: two tenants' sources may hold the
    same id, and both documents are kept."""
    tenants = [set(result.documents["tenant_id"].unique().tolist()) for result in results]
    if sum(map(len, tenants)) == len(set().union(*tenants)):
        return list(results)  # no tenant in two sources: no id can repeat (1M documents: 0.6 s saved)
    held: dict[tuple[str, str], str] = {}
    kept: list[CleanedFrame] = []
    for key, result in zip(keys, results, strict=True):
        frame = result.documents
        identity = list(zip(frame["tenant_id"].tolist(), frame["doc_id"].tolist(), strict=True))
        repeated = [pair in held for pair in identity]
        if not any(repeated):
            held.update(dict.fromkeys(identity, key))
            kept.append(result)
            continue
        quarantine = [
            QuarantineRecord(
                source=key,
                doc_id=doc_id,
                reason=QuarantineReason.DUPLICATE_ID.value,
                detail=f"another catalog of tenant {tenant_id!r} already holds this id ({held[tenant_id, doc_id]})",
            )
            for (tenant_id, doc_id), again in zip(identity, repeated, strict=True)
            if again
        ]
        held.update(dict.fromkeys((pair for pair, again in zip(identity, repeated, strict=True) if not again), key))
        by_reason = dict(result.stats.by_reason)
        by_reason[QuarantineReason.DUPLICATE_ID.value] = by_reason.get(QuarantineReason.DUPLICATE_ID.value, 0) + len(
            quarantine
        )
        stats = result.stats.model_copy(
            update={
                "rows_kept": result.stats.rows_kept - len(quarantine),
                "rows_quarantined": result.stats.rows_quarantined + len(quarantine),
                "by_reason": by_reason,
            }
        )
        documents = frame[[not again for again in repeated]].reset_index(drop=True)
        kept.append(CleanedFrame(documents, result.quarantine + quarantine, stats))
    return kept


def apply_inbox(documents: pd.DataFrame, rows: Iterable[RawRow], memo: ParsedRows | None = None) -> CleanedCatalogs:
    """``documents`` (a ``DOCUMENT_COLUMNS`` frame, or with a ``memo`` the form its ``parse``
    gives) with the inbox entries in ``rows`` applied in order.

    An upsert's record is cleaned again with its format's rules (as the catalog's rows are);
    one that fails is quarantined and its receipt ``rejected``. An upsert replaces the
    document with the same id and tenant, or is added. Ids live in a tenant's namespace: what
    other tenants hold neither refuses nor replaces anything (chunk ids name the tenant). A
    delete removes the document if present."""
    keys = list(zip(documents["tenant_id"].tolist(), documents["doc_id"].tolist(), strict=True))
    position = {key: i for i, key in enumerate(keys)}
    # Position -> the document now there (None: deleted); positions past the frame are additions.
    slots: dict[int, Document | None] = {}
    quarantine: list[QuarantineRecord] = []
    receipts: list[dict[str, Any]] = []
    superseded = tombstones = rows_in = 0

    def receipt(entry: InboxEntry, outcome: InboxOutcome, reason: str | None = None, detail: str | None = None) -> None:
        receipts.append(
            {
                "receipt": entry.receipt,
                "operation": entry.operation.value,
                "doc_id": entry.doc_id,
                "tenant_id": entry.tenant_id,
                "outcome": outcome.value,
                "reason": reason,
                "detail": detail,
            }
        )

    for row in rows:
        rows_in += 1
        entry = InboxEntry.model_validate_json(row.raw)
        key = (entry.tenant_id, entry.doc_id)
        if entry.operation is InboxOperation.DELETE:
            tombstones += 1
            if key in position:
                slots[position.pop(key)] = None
                superseded += 1
            receipt(entry, InboxOutcome.DELETED)
            continue
        record_row = RawRow(source=row.source, line_number=row.line_number, raw=json.dumps(entry.record))
        # An upsert always has its format (InboxEntry's validator).
        cleaned = clean_one(record_row, cast(CatalogFormat, entry.format), entry.tenant_id)
        rejection = cleaned if isinstance(cleaned, QuarantineRecord) else None
        if isinstance(cleaned, Document):
            doc = cleaned
            if doc.doc_id != entry.doc_id:
                rejection = QuarantineRecord(
                    source=row.source,
                    line_number=row.line_number,
                    doc_id=entry.doc_id,
                    reason=QuarantineReason.INVALID_FIELD_TYPE.value,
                    detail=f"the record's id {doc.doc_id!r} is not the entry's",
                    raw=record_row.raw[:RAW_EXCERPT_CHARS],
                )
        if rejection is not None:
            quarantine.append(rejection)
            receipt(entry, InboxOutcome.REJECTED, rejection.reason, rejection.detail)
            continue
        if key in position:
            slots[position[key]] = doc
            superseded += 1
        else:
            position[key] = len(documents) + len(slots)
            slots[position[key]] = doc
        receipt(entry, InboxOutcome.INDEXED)

    # Unchanged rows stay as they are; replaced and added documents are placed by position.
    base = documents.reset_index(drop=True)
    unchanged = base.drop(index=[p for p in slots if p < len(base)])
    placed = [(p, doc) for p, doc in sorted(slots.items()) if doc is not None]
    changed = documents_to_frame(doc for _, doc in placed)
    changed = (changed if memo is None else memo.add(changed)).set_axis([p for p, _ in placed])
    kept = pd.concat([unchanged, changed]).sort_index().reset_index(drop=True)
    counts = {reason.value: 0 for reason in QuarantineReason}
    for record in quarantine:
        counts[record.reason] += 1
    stats = CleaningStats(
        rows_in=rows_in,
        rows_kept=rows_in - len(quarantine) - tombstones,
        rows_quarantined=len(quarantine),
        by_reason=counts,
    )
    return CleanedCatalogs(kept, quarantine, stats, receipts, superseded, tombstones)


@dataclass(frozen=True)
class ChunkedTable:
    """A build's chunk table to store, and what making it took: how many documents were chunked
    and how many kept the last table's chunks, and how many documents have chunks."""

    write: TableWrite
    documents_chunked: int
    documents_reused: int
    documents: int


def chunk_into_table(
    documents: pd.DataFrame | PartedTable, settings: ChunkingSettings, last: PartedTable | None
) -> ChunkedTable:
    """The chunks of the documents (a frame, or the stored cleaned documents table), in document
    order, as the table to store. A document whose cleaned fields are unchanged since ``last``
    (the table stored before, made under the same ``chunker_tag``) keeps its chunks where they
    are; the others are read, chunked again, and only their chunks are written
    (``core.io.parted``). Each row keeps its document's key (``DOCUMENT_KEY``), which readers of
    the chunks do not see."""
    tag = chunker_tag(settings)
    keys, rows_at = _documents_by_key(documents, tag)
    shown = tuple(CHUNK_COLUMNS)
    previous = _chunk_keys(last, tag) if last is not None else None
    if last is None or previous is None:
        fresh = _keyed_chunks(rows_at(np.arange(len(keys))), keys, settings)
        return ChunkedTable(TableWrite(fresh, tag, columns=shown), len(keys), 0, _documents_of(fresh))
    known = pd.Index(previous[DOCUMENT_KEY]).unique().get_indexer(keys) >= 0
    fresh = _keyed_chunks(rows_at(np.flatnonzero(~known)), keys[~known], settings)
    both_keys = np.concatenate([previous[DOCUMENT_KEY], fresh[DOCUMENT_KEY].to_numpy(dtype=np.uint64)])
    both_ordinals = np.concatenate([previous["ordinal"], fresh["ordinal"].to_numpy(dtype=np.int64)])
    # Each chunk's document's position (NaN: a document no longer there), then its ordinal.
    document_position = pd.Series(np.arange(len(keys)), index=keys).reindex(both_keys).to_numpy()
    rows = np.flatnonzero(~np.isnan(document_position))
    order = rows[np.lexsort((both_ordinals[rows], document_position[rows]))]
    held = len(previous[DOCUMENT_KEY])
    sources = np.where(order < held, order, -1)
    added = take_rows(fresh, order[order >= held] - held).reset_index(drop=True)
    documents_chunked, documents_reused = int((~known).sum()), int(known.sum())
    count = len(pd.unique(both_keys[order]))
    write = extended_or_whole(added, tag, last, sources, shown)
    return ChunkedTable(write, documents_chunked, documents_reused, count)


@dataclass(frozen=True)
class ChunkTableFacts:
    """What the chunk checks and metadata report of a chunk table about to be stored."""

    duplicate_ids: int
    empty_texts: int
    sections: dict[str, int]
    head: pd.DataFrame


def chunk_table_facts(write: TableWrite, head_rows: int = 5) -> ChunkTableFacts:
    """Duplicate chunk ids, chunks without text, chunks by section and the first rows of the
    table ``write`` stores: over the rows it keeps (read a column at a time from its base) and
    those it adds, not over a frame of every chunk."""
    ids = _stored_column(write, "chunk_id")
    blank = pc.sum(_stored_column(write, BLANK_TEXT)).as_py() or 0
    counts = pc.value_counts(_stored_column(write, "section")).to_pylist()
    return ChunkTableFacts(
        duplicate_ids=write.rows - len(pc.unique(ids)),
        empty_texts=int(blank),
        sections={item["values"]: item["counts"] for item in counts},
        head=write.head(head_rows),
    )


def _blank(texts: pa.Array) -> pa.Array:
    """Whether each text is empty or only whitespace."""
    return pc.or_(pc.equal(pc.utf8_length(texts), 0), pc.utf8_is_space(texts))


def _stored_column(write: TableWrite, name: str) -> pa.ChunkedArray:
    """A column of every row ``write`` stores, in no particular order: the base's rows it keeps,
    then its own."""
    own = pa.chunked_array([pa.array(write.frame[name])])
    if write.base is None or write.sources is None:
        return own
    kept = write.base.read([name]).column(0).cast(own.type).take(pa.array(write.sources[write.sources >= 0]))
    return pa.chunked_array(kept.chunks + own.chunks, type=own.type)


def _documents_by_key(
    documents: pd.DataFrame | PartedTable, tag: str
) -> tuple[np.ndarray, Callable[[np.ndarray], pd.DataFrame]]:
    """Each document's key under ``tag``, and how to read the documents at some positions: a
    stored table holding its records' row keys is read only where asked."""
    if isinstance(documents, PartedTable) and KEY in documents.held_columns:
        table = documents
        return stored_document_keys(table, tag), lambda positions: documents_at(table, positions)
    frame = documents.read_pandas() if isinstance(documents, PartedTable) else documents
    return document_keys(frame, tag), lambda positions: take_rows(frame, positions).reset_index(drop=True)


def _chunk_keys(last: PartedTable, tag: str) -> dict[str, np.ndarray] | None:
    """The document key and ordinal of each chunk of ``last``, if made under ``tag``."""
    if last.tag != tag:
        return None
    table = last.read([DOCUMENT_KEY, "ordinal"])
    return {name: table.column(name).to_numpy() for name in (DOCUMENT_KEY, "ordinal")}


def _keyed_chunks(documents: pd.DataFrame, keys: np.ndarray, settings: ChunkingSettings) -> pd.DataFrame:
    """The chunks of a documents frame, each with its document's key (``keys``, one per
    document), its row hash and whether its text is blank."""
    frame = chunk_frame(documents, settings)
    pairs = zip(documents["tenant_id"].tolist(), documents["doc_id"].tolist(), strict=True)
    key_of = dict(zip(pairs, keys.tolist(), strict=True))
    chunk_pairs = zip(frame["tenant_id"].tolist(), frame["doc_id"].tolist(), strict=True)
    texts = pa.array(frame["text"], type=pa.large_string())
    return frame.assign(
        **{
            DOCUMENT_KEY: pd.Series([key_of[pair] for pair in chunk_pairs], dtype="uint64"),
            ROW_HASH: chunk_row_hashes(frame),
            BLANK_TEXT: _blank(texts).to_numpy(zero_copy_only=False),
        }
    )


def _documents_of(chunks: pd.DataFrame) -> int:
    return int(chunks[DOCUMENT_KEY].nunique())


def chunk_frame(documents: pd.DataFrame, settings: ChunkingSettings) -> pd.DataFrame:
    """The chunks of a documents frame, in document order, made a block of documents at a time:
    only one block's documents and chunks exist as objects at once."""
    starts = range(0, len(documents), RECORD_BLOCK_ROWS)
    blocks = (documents.iloc[start : start + RECORD_BLOCK_ROWS] for start in starts)
    frames = [chunks_to_frame(chunk_documents(frame_to_documents(block), settings)) for block in blocks]
    if len(frames) == 1:
        return frames[0]
    return pd.concat(frames, ignore_index=True) if frames else chunks_to_frame([])


def chunk_documents(documents: Sequence[Document], settings: ChunkingSettings) -> list[Chunk]:
    """Chunks with their ``content_hash``: the embedding text under this chunker config.

    A document's precomputed vectors go with it when it is one chunk, which they then describe.
    The chunks of a document cut into several carry each model's name with no vector
    (``Chunk.vectors``): the document's vector matches none of them, so they are encoded, and the
    embedding step reports it (docs/sources.md#precomputed-vectors)."""
    chunker = make_chunker(settings.kind, settings.window_words, settings.overlap_words)
    config = settings.model_dump_json()
    chunks = []
    for doc in documents:
        pieces = chunker.chunk(doc)
        vectors: dict[str, list[float] | None] = {}
        if doc.vectors:
            vectors = dict(doc.vectors) if len(pieces) == 1 else dict.fromkeys(doc.vectors)
        chunks += [
            chunk.model_copy(update={"content_hash": content_hash(config, chunk.embedding_text), "vectors": vectors})
            for chunk in pieces
        ]
    return chunks

