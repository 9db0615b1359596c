"""A build's chunks with their dense (and sparse) vectors, a slice at a time: what the FAISS,
qdrant-edge and server builds write.

A full build reads its stored tables slice by slice, the three files in step, when their rows
hold the same chunk ids in the same order (as the embedding steps write them). Read whole, the
three tables of 200k ACL chunks took 1.48 GB (measured by a script); the 1M build's qdrant-edge
step peaked at 13.2 GB with them, 8.3 GB without."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from retrieval_assets.core.embed.vectors import (
    arrow_dense_matrix,
    arrow_sparse_vectors,
    dense_dim,
    dense_matrices,
    sparse_slices,
)
from retrieval_assets.core.io.parted import PartedTable
from retrieval_assets.core.models import SparseVector

# A slice of a build: chunk rows, their dense matrix, their sparse vectors (None without a sparse table).
PointSlice = tuple[pd.DataFrame, np.ndarray, list[SparseVector] | None]


@dataclass(frozen=True)
class PointTables:
    """Chunks and their vectors, ``count`` rows of ``dim``-long dense vectors, read in slices."""

    count: int
    dim: int
    _chunk_slices: Callable[[int], Iterator[pd.DataFrame]]
    _dense_slices: Callable[[int], Iterator[np.ndarray]]
    _point_slices: Callable[[int], Iterator[PointSlice]]

    def chunks(self, rows: int) -> Iterator[pd.DataFrame]:
        """The chunk rows only, ``rows`` at a time (no vector is read)."""
        return self._chunk_slices(rows)

    def dense(self, rows: int) -> Iterator[np.ndarray]:
        """The dense vectors only, in the chunks' order, ``rows`` at a time."""
        return self._dense_slices(rows)

    def slices(self, rows: int) -> Iterator[PointSlice]:
        """The chunk rows with their vectors, ``rows`` at a time."""
        return self._point_slices(rows)

    @classmethod
    def in_memory(cls, chunks: pd.DataFrame, dense: pd.DataFrame, sparse: pd.DataFrame | None = None) -> PointTables:
        """Tables already read; the vector tables may hold other chunks too, in any order."""
        ids = chunks["chunk_id"].tolist()

        def chunk_slices(rows: int) -> Iterator[pd.DataFrame]:
            for start in range(0, len(chunks), rows):
                yield chunks.iloc[start : start + rows]

        def dense_slices(rows: int) -> Iterator[np.ndarray]:
            return dense_matrices(dense, ids, rows)

        def point_slices(rows: int) -> Iterator[PointSlice]:
            sparse_parts = sparse_slices(sparse, ids, rows) if sparse is not None else None
            return _joined(chunk_slices(rows), dense_slices(rows), sparse_parts)

        return cls(len(chunks), dense_dim(dense), chunk_slices, dense_slices, point_slices)

    @classmethod
    def stored(cls, chunks: PartedTable, dense: PartedTable, sparse: PartedTable | None = None) -> PointTables:
        """Stored tables, read in step a slice at a time where they line up row by row, else
        read whole (``in_memory``)."""
        ids = _chunk_ids(chunks)
        if not all(_chunk_ids(table).equals(ids) for table in (dense, sparse) if table is not None):
            return cls.in_memory(
                chunks.read_pandas(),
                dense.read_pandas(dtype_backend="pyarrow"),
                None if sparse is None else sparse.read_pandas(dtype_backend="pyarrow"),
            )

        def chunk_slices(rows: int) -> Iterator[pd.DataFrame]:
            for part in chunks.row_slices(rows):
                yield part.to_pandas()

        def dense_slices(rows: int) -> Iterator[np.ndarray]:
            for part in dense.row_slices(rows, ["embedding"]):
                yield arrow_dense_matrix(part.column("embedding").combine_chunks())

        def point_slices(rows: int) -> Iterator[PointSlice]:
            sparse_parts = (
                (
                    arrow_sparse_vectors(*(part.column(name).combine_chunks() for name in ("indices", "values")))
                    for part in sparse.row_slices(rows, ["indices", "values"])
                )
                if sparse is not None
                else None
            )
            return _joined(chunk_slices(rows), dense_slices(rows), sparse_parts)

        return cls(chunks.rows, _stored_dim(dense), chunk_slices, dense_slices, point_slices)


def _joined(
    chunks: Iterator[pd.DataFrame], dense: Iterator[np.ndarray], sparse: Iterator[list[SparseVector]] | None
) -> Iterator[PointSlice]:
    if sparse is None:
        return ((rows, matrix, None) for rows, matrix in zip(chunks, dense, strict=True))
    pairs = zip(chunks, dense, strict=True)
    return ((rows, matrix, vectors) for (rows, matrix), vectors in zip(pairs, sparse, strict=True))


def _chunk_ids(table: PartedTable) -> pa.ChunkedArray:
    """A stored table's chunk ids in row order, as one string type whatever the file's."""
    return table.column("chunk_id").cast(pa.large_string())


def _stored_dim(dense: PartedTable) -> int:
    """The length of a stored dense table's vectors (0 for an empty table)."""
    first = next(dense.row_slices(1, ["embedding"]), None)
    return len(first.column(0)[0]) if first is not None and first.num_rows else 0
