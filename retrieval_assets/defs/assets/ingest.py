"""raw_catalog -> cleaned_documents (+ quarantined_documents, inbox_receipts) -> chunks."""

from typing import Any

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetIn,
    AssetOut,
    MaterializeResult,
    MetadataValue,
    Output,
    asset,
    multi_asset,
)

from retrieval_assets.core.ingest.catalog import CatalogSource
from retrieval_assets.core.ingest.cleaning import CleaningStats
from retrieval_assets.core.ingest.inbox import InboxOutcome
from retrieval_assets.core.ingest.memo import ParsedRows, remove_legacy_chunk_memo
from retrieval_assets.core.ingest.raw_table import SourceRows, light_rows, raw_table, stored_texts
from retrieval_assets.core.ingest.reasons import QuarantineReason
from retrieval_assets.core.ingest.steps import (
    chunk_into_table,
    chunk_table_facts,
    clean_catalogs,
    read_raw_sources,
    source_key,
)
from retrieval_assets.core.io.parted import TableWrite, open_table
from retrieval_assets.core.io.tables import (
    CHUNK_COLUMNS,
    documents_to_frame,
    quarantine_to_frame,
    raw_rows_to_frame,
    receipts_to_frame,
)
from retrieval_assets.defs.io_manager import StoredTable
from retrieval_assets.defs.metadata import preview, source_table, stopwatch, table_metadata
from retrieval_assets.defs.resources import CatalogResource, ChunkingResource, IndexStorageResource

GROUP = "ingest"


@asset(
    group_name=GROUP,
    io_manager_key="parquet_io_manager",
    kinds={"parquet"},
)
def raw_catalog(
    context: AssetExecutionContext, catalog: CatalogResource, storage: IndexStorageResource
) -> MaterializeResult[TableWrite]:
    """Every line, file, table row or paper of every configured catalog source, undecoded beyond
    what reading needs, so that nothing is lost before cleaning. Folders of files are extracted
    here (text, headings, pages); a file unchanged since the last build is not read again. Rows
    the last build stored unchanged stay where they are; only the others are written
    (``core.ingest.raw_table``)."""
    sources = catalog.sources()
    last = open_table(storage.artifacts_dir.joinpath(*context.asset_key.path))
    with stopwatch() as timer:
        read, stats = read_raw_sources(sources, storage.ingest_cache_dir)
        write = raw_table(read, last)
    rows = sum(len(source_rows) for source_rows in read)
    context.log.info(f"read {rows} rows from {len(sources)} catalog source(s): {', '.join(sources)}")
    for name, source_stats in stats.items():
        figures = ", ".join(f"{key} {value:g}" for key, value in source_stats.items())
        context.log.info(f"{name} ({sources[name].format}): {figures}")
    return MaterializeResult(
        value=write,
        metadata={
            **table_metadata(raw_rows_to_frame([])),
            "dagster/row_count": MetadataValue.int(rows),
            "rows": rows,
            "rows_written": len(write.frame),
            "kept_in_place": write.kept,
            "rows_by_source": MetadataValue.json(_rows_by_source(read)),
            "sources": MetadataValue.json({name: s.model_dump(mode="json") for name, s in sources.items()}),
            "reading": source_table(
                {name: {"kind": sources[name].format, **source_stats} for name, source_stats in stats.items()}
            ),
            "seconds": timer["seconds"],
        },
    )


def _rows_by_source(read: list[SourceRows]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for rows in read:
        if len(rows):
            counts[rows.source] = counts.get(rows.source, 0) + len(rows)
    return counts


@multi_asset(
    group_name=GROUP,
    ins={"raw_catalog": AssetIn(metadata={"deferred": True})},
    outs={
        "cleaned_documents": AssetOut(
            io_manager_key="parquet_io_manager",
            kinds={"parquet"},
            description="Documents cleaned from the raw catalog rows (NFKC, LaTeX and whitespace cleanup), "
            "one per usable row, ready for chunking.",
        ),
        "quarantined_documents": AssetOut(
            io_manager_key="parquet_io_manager",
            kinds={"parquet"},
            description="Raw rows that cleaning could not use, each with its line number, reason and detail; "
            "kept for inspection and never indexed.",
        ),
        "inbox_receipts": AssetOut(
            io_manager_key="parquet_io_manager",
            kinds={"parquet"},
            description="What became of each document-inbox entry in this build (indexed, deleted, or rejected "
            "with its quarantine reason); index_version archives them once the candidate is sealed.",
        ),
    },
    check_specs=[
        AssetCheckSpec(
            "quarantine_ratio_below_threshold",
            asset="cleaned_documents",
            blocking=True,
            description="At most catalog.max_quarantine_ratio (default 20%) of raw rows are quarantined.",
        ),
        AssetCheckSpec(
            "rows_accounted_per_source",
            asset="cleaned_documents",
            blocking=True,
            description="For every catalog source, the rows (lines, files, table rows, papers) read equal the "
            "documents kept plus the rows quarantined.",
        ),
        AssetCheckSpec(
            "has_documents",
            asset="cleaned_documents",
            blocking=True,
            description="At least one document is left to index (an empty folder or a wrong path is named here, "
            "not met later as an index error).",
        ),
    ],
)
def cleaned_documents(
    context: AssetExecutionContext, catalog: CatalogResource, storage: IndexStorageResource, raw_catalog: StoredTable
):
    """NFKC, LaTeX and whitespace cleanup; rows that cannot be used are quarantined with a reason.
    The document inbox's upserts and deletes are applied after the catalogs. Rows unchanged since
    the last build are not parsed again (``core.ingest.memo``), nor is their text read."""
    memo, sources = ParsedRows(storage.ingest_cache_dir), catalog.sources()
    with stopwatch() as timer:
        raw = light_rows(raw_catalog.table)
        result = clean_catalogs(raw, list(sources.values()), memo, stored_texts(raw_catalog.table))
    kept, quarantined = result.table, quarantine_to_frame(result.quarantine)
    receipts = receipts_to_frame(result.receipts)
    if kept is None:
        raise RuntimeError("cleaning with a memo gives the documents table to store")
    accounted = kept.rows + len(quarantined) + result.superseded + result.tombstones
    if accounted != len(raw):
        raise RuntimeError(
            f"row accounting broke: {len(raw)} in, {kept.rows} kept + {len(quarantined)} quarantined"
            f" + {result.superseded} superseded by the inbox + {result.tombstones} inbox deletes"
        )
    per_source, unaccounted = _per_source(raw, sources, result.by_source)
    by_reason = quarantined["reason"].value_counts().to_dict() if len(quarantined) else {}
    # Every reason, zeros included, as numbers: the UI plots each one over time.
    counts_by_reason = {f"quarantined/{r.value}": int(by_reason.get(r.value, 0)) for r in QuarantineReason}
    ratio = len(quarantined) / max(len(raw), 1)
    yield Output(
        kept,
        output_name="cleaned_documents",
        metadata={
            **table_metadata(documents_to_frame([])),
            "dagster/row_count": MetadataValue.int(kept.rows),
            "rows_in": len(raw),
            "documents": kept.rows,
            "quarantined": len(quarantined),
            "quarantine_by_reason": MetadataValue.json(by_reason),
            **counts_by_reason,
            "rows_parsed": memo.parsed,
            "rows_reused_from_memo": memo.reused,
            "by_source": source_table(per_source),
            "superseded_by_inbox": result.superseded,
            "inbox_deletes": result.tombstones,
            "seconds": timer["seconds"],
            "preview": preview(kept.head(5), ["doc_id", "title", "text"]),
        },
    )
    yield Output(
        quarantined,
        output_name="quarantined_documents",
        metadata={
            **table_metadata(quarantined),
            "rows": len(quarantined),
            "by_reason": MetadataValue.json(by_reason),
            **counts_by_reason,
            "preview": preview(quarantined, ["line_number", "doc_id", "reason", "detail"]),
        },
    )
    outcomes = receipts["outcome"].value_counts().to_dict() if len(receipts) else {}
    yield Output(
        receipts,
        output_name="inbox_receipts",
        metadata={
            **table_metadata(receipts),
            "entries": len(receipts),
            **{f"outcome/{outcome.value}": int(outcomes.get(outcome.value, 0)) for outcome in InboxOutcome},
            "preview": preview(receipts, ["receipt", "operation", "doc_id", "outcome", "reason"]),
        },
    )
    reasons = ", ".join(f"{reason} {count}" for reason, count in by_reason.items()) or "none"
    limit = catalog.max_quarantine_ratio
    if ratio > limit:
        example = quarantined.iloc[0]
        context.log.error(
            f"{len(quarantined)} of {len(raw)} rows quarantined ({ratio:.0%}, limit {limit:.0%}, "
            f"catalog.max_quarantine_ratio): {reasons}; for example {example['source']} row "
            f"{example['line_number']}: {example['reason']}, {example['detail']}"
        )
    yield AssetCheckResult(
        check_name="quarantine_ratio_below_threshold",
        asset_key="cleaned_documents",
        passed=ratio <= limit,
        description=f"{len(quarantined)} of {len(raw)} rows quarantined ({ratio:.1%}; limit "
        f"{limit:.0%}): {reasons}",
        metadata={
            "ratio": round(ratio, 4),
            "threshold": limit,
            "quarantined": len(quarantined),
            "rows_in": len(raw),
            "by_reason": MetadataValue.json(by_reason),
        },
    )
    yield AssetCheckResult(
        check_name="rows_accounted_per_source",
        asset_key="cleaned_documents",
        passed=not unaccounted,
        metadata={"unaccounted": MetadataValue.json(unaccounted), "sources": len(per_source)},
    )
    read = "; ".join(f"{name}: {figures['rows_in']} rows read" for name, figures in per_source.items())
    if not kept.rows:
        context.log.error(
            f"no documents to index: {read or 'no catalog source'}; {len(quarantined)} quarantined ({reasons}). "
            "Check the catalog's path and its include / exclude patterns"
        )
    yield AssetCheckResult(
        check_name="has_documents",
        asset_key="cleaned_documents",
        passed=kept.rows > 0,
        description=f"{kept.rows} documents to index ({read or 'no catalog source'}; {len(quarantined)} quarantined)",
        metadata={"documents": kept.rows, "quarantined": len(quarantined)},
    )


def _per_source(
    raw: pd.DataFrame, sources: dict[str, CatalogSource], stats: dict[str, CleaningStats]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each catalog source's rows read, kept and quarantined by reason; and the sources whose
    rows read are not kept plus quarantined, with what is missing."""
    rows_read = raw["source"].value_counts().to_dict()
    table, unaccounted = {}, {}
    for name, source in sources.items():
        key = source_key(source)
        if source.format == "inbox" or key not in stats:
            continue
        part = stats[key]
        read = int(rows_read.get(key, 0))
        reasons = {reason: count for reason, count in part.by_reason.items() if count}
        table[name] = {
            "kind": source.format,
            "rows_in": read,
            "kept": part.rows_kept,
            "quarantined": part.rows_quarantined,
            "reasons": ", ".join(f"{reason} {count}" for reason, count in reasons.items()),
        }
        if read != part.rows_kept + part.rows_quarantined:
            unaccounted[name] = f"{read} read, {part.rows_kept} kept + {part.rows_quarantined} quarantined"
    return table, unaccounted


@asset(
    group_name=GROUP,
    io_manager_key="parquet_io_manager",
    kinds={"parquet"},
    ins={"cleaned_documents": AssetIn(metadata={"deferred": True})},
    check_specs=[
        AssetCheckSpec(
            "chunk_ids_unique",
            asset="chunks",
            blocking=True,
            description="No two chunks share a chunk id: every id {tenant}/{doc_id}#{n} names one chunk.",
        ),
        AssetCheckSpec(
            "no_empty_chunk_text",
            asset="chunks",
            blocking=True,
            description="Every chunk has text left after stripping whitespace.",
        ),
    ],
)
def chunks(
    context: AssetExecutionContext,
    chunking: ChunkingResource,
    storage: IndexStorageResource,
    cleaned_documents: StoredTable,
):  # no return annotation: Dagster reads one as an output tuple once check_specs are present
    """Section-aware (IMRaD) or sliding-window chunks with deterministic ids ``{tenant}/{doc_id}#{n}``;
    documents unchanged since the last build keep their chunks where they are, and only the others'
    are written (``core.ingest.steps.chunk_into_table``)."""
    settings = chunking.settings()
    last = open_table(storage.artifacts_dir.joinpath(*context.asset_key.path))
    with stopwatch() as timer:
        made = chunk_into_table(cleaned_documents.table, settings, last)
        facts = chunk_table_facts(made.write)
    remove_legacy_chunk_memo(storage.ingest_cache_dir)
    write = made.write
    shown = write.frame[list(CHUNK_COLUMNS)]
    return MaterializeResult(
        value=write,
        metadata={
            **table_metadata(shown),
            "dagster/row_count": MetadataValue.int(write.rows),
            "chunks": write.rows,
            "chunks_written": len(write.frame),
            "kept_in_place": write.kept,
            "documents": made.documents,
            "documents_chunked": made.documents_chunked,
            "documents_reused": made.documents_reused,
            "chunker": settings.kind,
            "window_words": settings.window_words,
            "overlap_words": settings.overlap_words,
            "sections": MetadataValue.json(facts.sections),
            "seconds": timer["seconds"],
            "preview": preview(facts.head, ["chunk_id", "section", "text"]),
        },
        check_results=[
            AssetCheckResult(
                check_name="chunk_ids_unique",
                passed=facts.duplicate_ids == 0,
                metadata={"duplicates": facts.duplicate_ids, "chunks": write.rows},
            ),
            AssetCheckResult(
                check_name="no_empty_chunk_text",
                passed=facts.empty_texts == 0,
                metadata={"empty": facts.empty_texts, "chunks": write.rows},
            ),
        ],
    )
