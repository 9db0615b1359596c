"""chunks -> dense_embeddings, sparse_embeddings; the per-shard cache warm-up.

Every encoder call goes through the content-addressed embedding cache: a chunk whose text,
chunker config and model are unchanged is never encoded twice.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from dagster import AssetExecutionContext, AssetIn, MaterializeResult, MetadataValue, asset

from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.embed.cache import CacheStats
from retrieval_assets.core.embed.steps import (
    DENSE_CHUNK_COLUMNS,
    SPARSE_CHUNK_COLUMNS,
    TEXT_COLUMNS,
    DeferredChunkTexts,
    DenseStats,
    PrecomputedStats,
    embed_dense,
    embed_sparse,
    embedding_cache,
    embeddings_table,
)
from retrieval_assets.core.ingest.steps import (
    chunk_documents,
    clean_catalog,
    read_raw_catalog,
)
from retrieval_assets.core.io.parted import TableWrite, open_table
from retrieval_assets.core.io.tables import chunks_to_frame
from retrieval_assets.defs.io_manager import StoredTable
from retrieval_assets.defs.metadata import log_progress, stopwatch, table_metadata
from retrieval_assets.defs.partitions import shard_of, source_shards
from retrieval_assets.defs.resources import (
    CatalogResource,
    ChunkingResource,
    IndexBuildResource,
    IndexStorageResource,
    ModelResource,
)

GROUP = "embed"


def _embed_chunks(
    context: AssetExecutionContext,
    storage: IndexStorageResource,
    build: IndexBuildResource,
    chunks: StoredTable,
    kind: str,
    encoder: DenseEncoder | SparseEncoder,
    embed: Callable[..., tuple[pd.DataFrame, CacheStats]],
) -> tuple[TableWrite, dict[str, Any]]:
    """Every chunk's vectors from ``embed`` (``embed_dense`` / ``embed_sparse``) through the
    ``kind`` cache, as the table to store (the last one's unchanged rows kept in place:
    ``embeddings_table``), and the metadata both embedding assets record. The chunks' texts are
    read only if one of them is encoded."""
    cache = embedding_cache(storage.cache_dir, kind, encoder)
    change = cache.change_of_encoder()
    if change is not None:
        context.log.info(f"{kind} embeddings: {change}")
    table = chunks.read()
    texts = DeferredChunkTexts(len(table), lambda positions: chunks.read_rows(TEXT_COLUMNS, positions))
    last = open_table(storage.artifacts_dir.joinpath(*context.asset_key.path))
    progress, block = log_progress(context, kind), build.embedding_block_rows
    with stopwatch() as timer:
        write, stats = embeddings_table(
            table,
            lambda rows, rows_texts: embed(rows, encoder, cache, progress, block, rows_texts),
            cache.fingerprint,
            last,
            texts,
        )
        # Nightly runs append segments; merge them once there are too many, keeping live vectors only.
        cache.compact(table["content_hash"].tolist())
    seconds = timer["seconds"]
    precomputed = _precomputed(context, stats.precomputed) if isinstance(stats, DenseStats) else {}
    return write, {
        **({"encoder_changed": change} if change is not None else {}),
        **table_metadata(write.frame),
        "dagster/row_count": MetadataValue.int(write.rows),
        "vectors": write.rows,
        "vectors_written": len(write.frame),
        "kept_in_place": write.kept,
        "model": encoder.model_name,
        "encoder_fingerprint": cache.fingerprint,
        "cache_segments": len(cache.segments()),
        "encoded": stats.encoded,
        "reused_from_cache": stats.reused,
        "seconds": seconds,
        "encoded_per_second": round(stats.encoded / max(seconds, 1e-9), 2),
        **precomputed,
    }


def _precomputed(context: AssetExecutionContext, stats: PrecomputedStats) -> dict[str, Any]:
    """Metadata and log lines on the catalog's precomputed vectors: none goes unused unsaid."""
    if stats.other_models:
        counts = ", ".join(f"{model}: {count}" for model, count in stats.other_models.items())
        context.log.info(
            f"dense embeddings: ignored precomputed vectors of models other than the configured one ({counts})"
        )
    if stats.split:
        context.log.warning(
            f"dense embeddings: {stats.split_documents} document(s) carry a vector of the configured model but are cut "
            f"into {stats.split} chunks, which were encoded (e.g. {stats.examples['split']}): raise "
            "chunking.window_words or drop the vector"
        )
    if stats.wrong_dim:
        context.log.warning(
            f"dense embeddings: {stats.wrong_dim} chunk(s) carry a vector of the configured model whose length is not "
            f"its dimension, and were encoded (e.g. {stats.examples['wrong_dim']})"
        )
    return {
        "precomputed_used": stats.used,
        "precomputed_unused": stats.unused,
        "precomputed_other_models": MetadataValue.json(stats.other_models),
    }


@asset(
    group_name=GROUP,
    io_manager_key="parquet_io_manager",
    kinds={"parquet"},
    ins={"chunks": AssetIn(metadata={"columns": DENSE_CHUNK_COLUMNS, "deferred": True})},
)
def dense_embeddings(
    context: AssetExecutionContext,
    models: ModelResource,
    storage: IndexStorageResource,
    build: IndexBuildResource,
    chunks: StoredTable,
) -> MaterializeResult[TableWrite]:
    """One L2-normalised vector per chunk from the configured dense encoder (GPU when present), or
    the catalog's own vector of that model where a one-chunk document carries one."""
    encoder = models.dense_encoder()
    write, metadata = _embed_chunks(context, storage, build, chunks, "dense", encoder, embed_dense)
    return MaterializeResult(value=write, metadata={**metadata, "dim": encoder.dim})


@asset(
    group_name=GROUP,
    io_manager_key="parquet_io_manager",
    kinds={"parquet"},
    ins={"chunks": AssetIn(metadata={"columns": SPARSE_CHUNK_COLUMNS, "deferred": True})},
)
def sparse_embeddings(
    context: AssetExecutionContext,
    models: ModelResource,
    storage: IndexStorageResource,
    build: IndexBuildResource,
    chunks: StoredTable,
) -> MaterializeResult[TableWrite]:
    """SPLADE term weights per chunk, for learned-sparse retrieval (the nonzero-term figures are
    of the vectors this materialization wrote)."""
    encoder = models.sparse_encoder()
    write, metadata = _embed_chunks(context, storage, build, chunks, "sparse", encoder, embed_sparse)
    nonzeros = write.frame["indices"].map(len) if len(write.frame) else pd.Series([0])
    return MaterializeResult(
        value=write,
        metadata={
            **metadata,
            "vocab_size": encoder.vocab_size,
            "mean_nonzero_terms": round(float(nonzeros.mean()), 1),
            "p95_nonzero_terms": float(np.percentile(nonzeros, 95)),
        },
    )


@asset(group_name=GROUP, partitions_def=source_shards, kinds={"python"})
def embedding_cache_shard(
    context: AssetExecutionContext,
    catalog: CatalogResource,
    chunking: ChunkingResource,
    models: ModelResource,
    storage: IndexStorageResource,
    build: IndexBuildResource,
) -> MaterializeResult:
    """Dense and SPLADE vectors of one hash shard of one catalog source, into the embedding cache.

    Backfill it (shards in parallel) before the whole build on a large or new corpus; the
    whole build then encodes nothing that a shard already did."""
    keys = context.partition_key.keys_by_dimension
    sources = catalog.sources()
    if keys["source"] not in sources:
        raise ValueError(f"catalog source {keys['source']!r} is no longer configured; known: {sorted(sources)}")
    source = sources[keys["source"]]
    cleaned = clean_catalog(read_raw_catalog(source, storage.ingest_cache_dir), source)
    shard = [d for d in cleaned.documents if shard_of(d.doc_id) == keys["shard"]]
    chunks = chunks_to_frame(chunk_documents(shard, chunking.settings()))
    dense, sparse = models.dense_encoder(), models.sparse_encoder()
    with stopwatch() as timer:
        block = build.embedding_block_rows
        _, dense_stats = embed_dense(
            chunks, dense, embedding_cache(storage.cache_dir, "dense", dense), log_progress(context, "dense"), block
        )
        _, sparse_stats = embed_sparse(
            chunks, sparse, embedding_cache(storage.cache_dir, "sparse", sparse), log_progress(context, "sparse"), block
        )
    return MaterializeResult(
        metadata={
            "documents": len(shard),
            "chunks": len(chunks),
            "dense_encoded": dense_stats.encoded,
            "dense_precomputed": dense_stats.precomputed.used,
            "sparse_encoded": sparse_stats.encoded,
            "reused_from_cache": dense_stats.reused,
            "seconds": timer["seconds"],
        }
    )
