"""Embedding steps: dense and SPLADE vectors of every chunk through the content-addressed cache."""

from __future__ import annotations

from collections.abc import Sequence
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
from retrieval_assets.core.models import Chunk


def _embed(
    chunks: Sequence[Chunk],
    encode_block: BlockEncoder,
    cache: EmbeddingCache,
    columns: list[str],
    progress: ProgressCallback | None,
    block_rows: int,
) -> tuple[pd.DataFrame, CacheStats]:
    keys = [c.content_hash for c in chunks]
    if not all(keys):
        raise ValueError("chunks lack a content_hash: make them with chunk_documents")
    texts = [c.embedding_text for c in chunks]
    values, stats = encode_with_cache(keys, texts, encode_block, cache, block_rows=block_rows, progress=progress)
    values.insert(0, "chunk_id", pd.Series([c.chunk_id for c in chunks], dtype="string"))
    return values[columns], stats


def embed_dense(
    chunks: Sequence[Chunk],
    encoder: DenseEncoder,
    cache: EmbeddingCache,
    progress: ProgressCallback | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
) -> tuple[pd.DataFrame, CacheStats]:
    """Dense vectors of every chunk; only text the cache lacks is encoded."""
    return _embed(
        chunks,
        lambda texts, report: dense_values(np.asarray(encoder.encode_documents(texts, progress=report))),
        cache,
        DENSE_COLUMNS,
        progress,
        block_rows,
    )


def embed_sparse(
    chunks: Sequence[Chunk],
    encoder: SparseEncoder,
    cache: EmbeddingCache,
    progress: ProgressCallback | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
) -> tuple[pd.DataFrame, CacheStats]:
    """SPLADE vectors of every chunk; only text the cache lacks is encoded."""
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


