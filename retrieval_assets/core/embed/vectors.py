"""Embedding tables: dense and sparse vectors keyed by chunk_id, stored as Parquet.

A table's vector columns hold a numpy array per row, or are Arrow lists (``pd.ArrowDtype``,
read with ``dtype_backend="pyarrow"``): converting 104k ACL vectors into numpy arrays per row
on reading costs more than reading them, and an index step may need only a few."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

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


def _arrow_rows(column: pd.Series, positions: np.ndarray) -> pa.Array | None:
    """The rows of an Arrow list column at ``positions``; None for a column of numpy arrays."""
    if not isinstance(column.dtype, pd.ArrowDtype):
        return None
    rows = pa.array(column).take(pa.array(positions, type=pa.int64()))
    # A table read from several row groups is a chunked array; only the rows taken are joined.
    return rows.combine_chunks() if isinstance(rows, pa.ChunkedArray) else rows


def dense_matrix(frame: pd.DataFrame, chunk_ids: Sequence[str]) -> np.ndarray:
    """Vectors for ``chunk_ids`` in that order, as a float32 (n, dim) matrix."""
    if not len(chunk_ids):
        return np.zeros((0, 0), dtype=np.float32)
    return _dense_rows(frame, _positions(frame, chunk_ids, "dense embedding"))


def dense_matrices(frame: pd.DataFrame, chunk_ids: Sequence[str], rows: int) -> Iterator[np.ndarray]:
    """``dense_matrix`` of ``chunk_ids`` in consecutive slices of ``rows``: the table is indexed
    once, and only one slice's vectors are copied out at a time."""
    positions = _positions(frame, chunk_ids, "dense embedding")
    for start in range(0, len(positions), rows):
        yield _dense_rows(frame, positions[start : start + rows])


def dense_dim(frame: pd.DataFrame) -> int:
    """The length of a dense table's vectors (0 for an empty table)."""
    return len(frame["embedding"].iloc[0]) if len(frame) else 0


def _dense_rows(frame: pd.DataFrame, positions: np.ndarray) -> np.ndarray:
    rows = _arrow_rows(frame["embedding"], positions)
    if rows is None:
        return np.vstack(frame["embedding"].to_numpy()[positions]).astype(np.float32, copy=False)
    return arrow_dense_matrix(rows)


def arrow_dense_matrix(rows: pa.Array) -> np.ndarray:
    """An Arrow list column of equal-length vectors as a float32 (n, dim) matrix."""
    lengths = pc.list_value_length(rows).to_numpy(zero_copy_only=False)
    if len(set(lengths.tolist())) != 1:
        raise ValueError(f"dense embedding table mixes vector lengths {sorted(set(lengths.tolist()))}")
    return rows.flatten().to_numpy(zero_copy_only=False).reshape(len(rows), -1).astype(np.float32, copy=False)


def sparse_vectors(frame: pd.DataFrame, chunk_ids: Sequence[str]) -> list[SparseVector]:
    """Sparse vectors for ``chunk_ids`` in that order."""
    return _sparse_rows(frame, _positions(frame, chunk_ids, "sparse embedding"))


def sparse_slices(frame: pd.DataFrame, chunk_ids: Sequence[str], rows: int) -> Iterator[list[SparseVector]]:
    """``sparse_vectors`` of ``chunk_ids`` in consecutive slices of ``rows``, the table indexed once
    (as Python lists a SPLADE vector takes ~10 KB)."""
    positions = _positions(frame, chunk_ids, "sparse embedding")
    for start in range(0, len(positions), rows):
        yield _sparse_rows(frame, positions[start : start + rows])


def _sparse_rows(frame: pd.DataFrame, found: np.ndarray) -> list[SparseVector]:
    arrow_indices, arrow_values = _arrow_rows(frame["indices"], found), _arrow_rows(frame["values"], found)
    if arrow_indices is not None and arrow_values is not None:
        return arrow_sparse_vectors(arrow_indices, arrow_values)
    indices, values = frame["indices"].to_numpy(), frame["values"].to_numpy()
    return [SparseVector(indices=indices[p].tolist(), values=values[p].tolist()) for p in found]


def arrow_sparse_vectors(indices: pa.Array, values: pa.Array) -> list[SparseVector]:
    """Arrow list columns of a sparse table's indices and values as vectors."""
    return [SparseVector(indices=i, values=v) for i, v in zip(indices.to_pylist(), values.to_pylist(), strict=True)]
