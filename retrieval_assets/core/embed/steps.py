"""Embedding steps: dense and SPLADE vectors of every chunk through the content-addressed cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from retrieval_assets.core.embed.base import DenseEncoder, ProgressCallback, SparseEncoder, encoder_fingerprint
from retrieval_assets.core.embed.cache import (
    DEFAULT_BLOCK_ROWS,
    BlockEncoder,
    CacheStats,
    EmbeddingCache,
    encode_with_cache,
)
from retrieval_assets.core.embed.vectors import DENSE_COLUMNS, SPARSE_COLUMNS, dense_values, sparse_values
from retrieval_assets.core.models import embedding_text


def _embed(
    chunks: pd.DataFrame,
    encode_block: BlockEncoder,
    cache: EmbeddingCache,
    columns: list[str],
    progress: ProgressCallback | None,
    block_rows: int,
) -> tuple[pd.DataFrame, CacheStats]:
    # Read from the table's columns: building a Chunk per row cost 2 s per step on the ACL Anthology.
    keys = chunks["content_hash"].tolist()
    if not all(isinstance(key, str) and key for key in keys):
        raise ValueError("chunks lack a content_hash: make them with chunk_documents")
    texts = list(map(embedding_text, chunks["title"].fillna("").tolist(), chunks["text"].tolist()))
    values, stats = encode_with_cache(keys, texts, encode_block, cache, block_rows=block_rows, progress=progress)
    values.insert(0, "chunk_id", pd.Series(chunks["chunk_id"].to_numpy(), dtype="string"))
    return values[columns], stats


def embed_dense(
    chunks: pd.DataFrame,
    encoder: DenseEncoder,
    cache: EmbeddingCache,
    progress: ProgressCallback | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
) -> tuple[pd.DataFrame, CacheStats]:
    """Dense vectors of every chunk of a chunks table; only text the cache lacks is encoded."""
    return _embed(
        chunks,
        lambda texts, report: dense_values(np.asarray(encoder.encode_documents(texts, progress=report))),
        cache,
        DENSE_COLUMNS,
        progress,
        block_rows,
    )


def embed_sparse(
    chunks: pd.DataFrame,
    encoder: SparseEncoder,
    cache: EmbeddingCache,
    progress: ProgressCallback | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
) -> tuple[pd.DataFrame, CacheStats]:
    """SPLADE vectors of every chunk of a chunks table; only text the cache lacks is encoded."""
    return _embed(
        chunks,
        lambda texts, report: sparse_values(encoder.encode_documents(texts, progress=report)),
        cache,
        SPARSE_COLUMNS,
        progress,
        block_rows,
    )


def embedding_cache(cache_root: Path, kind: str, encoder: DenseEncoder | SparseEncoder) -> EmbeddingCache:
    return EmbeddingCache(cache_root / kind, encoder_fingerprint(encoder))


