"""raw_catalog -> cleaned_documents (+ quarantined_documents, inbox_receipts) -> chunks."""


import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetOut,
    MaterializeResult,
    MetadataValue,
    Output,
    asset,
    multi_asset,
)

from retrieval_assets.core.ingest.cleaning import QuarantineReason
from retrieval_assets.core.ingest.inbox import InboxOutcome
from retrieval_assets.core.ingest.memo import ChunkMemo, ParsedRows
from retrieval_assets.core.ingest.steps import chunk_frame, clean_catalogs, read_raw_catalogs
from retrieval_assets.core.io.tables import quarantine_to_frame, receipts_to_frame
from retrieval_assets.defs.metadata import preview, stopwatch, table_metadata
from retrieval_assets.defs.resources import CatalogResource, ChunkingResource, IndexStorageResource

GROUP = "ingest"
MAX_QUARANTINE_RATIO = 0.2


@asset(
    group_name=GROUP,
    io_manager_key="parquet_io_manager",
    kinds={"parquet"},
)
def raw_catalog(context: AssetExecutionContext, catalog: CatalogResource) -> MaterializeResult[pd.DataFrame]:
    """Every line of every configured catalog, undecoded beyond UTF-8, so that nothing is lost before cleaning."""
    sources = catalog.sources()
    with stopwatch() as timer:
        frame = read_raw_catalogs(list(sources.values()))
    context.log.info(f"read {len(frame)} rows from {len(sources)} catalog(s): {', '.join(sources)}")
    return MaterializeResult(
        value=frame,
        metadata={
            **table_metadata(frame),
            "rows": len(frame),
            "rows_by_source": MetadataValue.json(frame["source"].value_counts().to_dict()),
            "sources": MetadataValue.json({name: s.model_dump() for name, s in sources.items()}),
            "seconds": timer["seconds"],
        },
    )


@multi_asset(
    group_name=GROUP,
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
            description=f"At most {MAX_QUARANTINE_RATIO:.0%} of raw rows are quarantined.",
        )
    ],
)
def cleaned_documents(
    context: AssetExecutionContext, catalog: CatalogResource, storage: IndexStorageResource, raw_catalog: pd.DataFrame
):
    """NFKC, LaTeX and whitespace cleanup; rows that cannot be used are quarantined with a reason.
    The document inbox's upserts and deletes are applied after the catalogs. Rows unchanged since
    the last build are not parsed again (``core.ingest.memo``)."""
    memo = ParsedRows(storage.ingest_cache_dir)
    with stopwatch() as timer:
        result = clean_catalogs(raw_catalog, list(catalog.sources().values()), memo)
    kept, quarantined = result.documents, quarantine_to_frame(result.quarantine)
    receipts = receipts_to_frame(result.receipts)
    accounted = len(kept) + len(quarantined) + result.superseded + result.tombstones
    if accounted != len(raw_catalog):
        raise RuntimeError(
            f"row accounting broke: {len(raw_catalog)} in, {len(kept)} kept + {len(quarantined)} quarantined"
            f" + {result.superseded} superseded by the inbox + {result.tombstones} inbox deletes"
        )
    by_reason = quarantined["reason"].value_counts().to_dict() if len(quarantined) else {}
    # Every reason, zeros included, as numbers: the UI plots each one over time.
    counts_by_reason = {f"quarantined/{r.value}": int(by_reason.get(r.value, 0)) for r in QuarantineReason}
    ratio = len(quarantined) / max(len(raw_catalog), 1)
    yield Output(
        kept,
        output_name="cleaned_documents",
        metadata={
            **table_metadata(kept),
            "rows_in": len(raw_catalog),
            "documents": len(kept),
            "quarantined": len(quarantined),
            "quarantine_by_reason": MetadataValue.json(by_reason),
            **counts_by_reason,
            "rows_parsed": memo.parsed,
            "rows_reused_from_memo": memo.reused,
            "superseded_by_inbox": result.superseded,
            "inbox_deletes": result.tombstones,
            "seconds": timer["seconds"],
            "preview": preview(kept, ["doc_id", "title", "text"]),
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
    yield AssetCheckResult(
        check_name="quarantine_ratio_below_threshold",
        asset_key="cleaned_documents",
        passed=ratio <= MAX_QUARANTINE_RATIO,
        metadata={
            "ratio": round(ratio, 4),
            "threshold": MAX_QUARANTINE_RATIO,
            "quarantined": len(quarantined),
            "rows_in": len(raw_catalog),
        },
    )


@asset(
    group_name=GROUP,
    io_manager_key="parquet_io_manager",
    kinds={"parquet"},
    check_specs=[
        AssetCheckSpec(
            "chunk_ids_unique",
            asset="chunks",
            blocking=True,
            description="No two chunks share a chunk id: every id {doc_id}#{n} names one chunk.",
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
    cleaned_documents: pd.DataFrame,
):  # no return annotation: Dagster reads one as an output tuple once check_specs are present
    """Section-aware (IMRaD) or sliding-window chunks with deterministic ids ``{doc_id}#{n}``;
    documents unchanged since the last build keep their chunks (``core.ingest.memo``)."""
    settings = chunking.settings()
    with stopwatch() as timer:
        frame, memo_stats = chunk_frame(cleaned_documents, settings, ChunkMemo(storage.ingest_cache_dir, settings))
    duplicates = int(frame["chunk_id"].duplicated().sum())
    empty = int((frame["text"].str.strip() == "").sum())
    return MaterializeResult(
        value=frame,
        metadata={
            **table_metadata(frame),
            "chunks": len(frame),
            "documents": int(frame["doc_id"].nunique()),
            **memo_stats,
            "chunker": settings.kind,
            "window_words": settings.window_words,
            "overlap_words": settings.overlap_words,
            "sections": MetadataValue.json(frame["section"].value_counts().to_dict()),
            "seconds": timer["seconds"],
            "preview": preview(frame, ["chunk_id", "section", "text"]),
        },
        check_results=[
            AssetCheckResult(
                check_name="chunk_ids_unique",
                passed=duplicates == 0,
                metadata={"duplicates": duplicates, "chunks": len(frame)},
            ),
            AssetCheckResult(
                check_name="no_empty_chunk_text", passed=empty == 0, metadata={"empty": empty, "chunks": len(frame)}
            ),
        ],
    )
