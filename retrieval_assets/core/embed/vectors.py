"""Embedding tables: dense and sparse vectors keyed by chunk_id, stored as Parquet."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from retrieval_assets.core.models import SparseVector

DENSE_COLUMNS = ["chunk_id", "content_hash", "embedding"]
SPARSE_COLUMNS = ["chunk_id", "content_hash", "indices", "values"]


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


def dense_values(vectors: np.ndarray) -> pd.DataFrame:
    """The value column of a dense table, one row per vector."""
    return pd.DataFrame({"embedding": [v.astype(np.float32) for v in vectors]})


def sparse_values(vectors: Sequence[SparseVector]) -> pd.DataFrame:
    """The value columns of a sparse table, one row per vector."""
    return pd.DataFrame(
        {
            "indices": [np.asarray(v.indices, dtype=np.int32) for v in vectors],
            "values": [np.asarray(v.values, dtype=np.float32) for v in vectors],
        }
    )


def _positions(frame: pd.DataFrame, chunk_ids: Sequence[str], what: str) -> np.ndarray:
    position = pd.Index(frame["chunk_id"])
    if not position.is_unique:
        raise ValueError(f"{what} table has duplicate chunk ids")
    found = position.get_indexer(list(chunk_ids))
    if (found < 0).any():
        missing = [cid for cid, p in zip(chunk_ids, found, strict=True) if p < 0][:5]
        raise ValueError(f"{what} table lacks {int((found < 0).sum())} chunks, e.g. {missing}; re-materialize it")
    return found


def dense_matrix(frame: pd.DataFrame, chunk_ids: Sequence[str]) -> np.ndarray:
    """Vectors for ``chunk_ids`` in that order, as a float32 (n, dim) matrix."""
    if not len(chunk_ids):
        return np.zeros((0, 0), dtype=np.float32)
    rows = frame["embedding"].to_numpy()[_positions(frame, chunk_ids, "dense embedding")]
    return np.vstack(rows).astype(np.float32)


def sparse_vectors(frame: pd.DataFrame, chunk_ids: Sequence[str]) -> list[SparseVector]:
    """Sparse vectors for ``chunk_ids`` in that order."""
    found = _positions(frame, chunk_ids, "sparse embedding")
    indices, values = frame["indices"].to_numpy(), frame["values"].to_numpy()
    return [SparseVector(indices=indices[p].tolist(), values=values[p].tolist()) for p in found]
