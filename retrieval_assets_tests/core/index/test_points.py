"""A build's chunks with their vectors, in slices: read from stored Parquet tables a slice at a
time (whatever their row groups), the same points as the tables read whole; tables whose rows
do not line up are read whole, and each chunk still gets its own vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from retrieval_assets.core.index.build import index_payloads, point_batches
from retrieval_assets.core.index.points import PointTables
from retrieval_assets.core.io.parted import PartedTable, TableWrite, open_table, table_path
from retrieval_assets.core.io.tables import parquet_row_slices
from retrieval_assets_tests.core.index.test_delta import _chunks, _vectors


def _stored(
    tmp_path: Path, chunks: pd.DataFrame, dense: pd.DataFrame, sparse: pd.DataFrame
) -> tuple[PartedTable, ...]:
    """The three tables as Parquet files with row groups of different sizes (3, 5 and 7 rows)."""
    paths = tuple(tmp_path / f"{name}.parquet" for name in ("chunks", "dense", "sparse"))
    for frame, path, group in zip((chunks, dense, sparse), paths, (3, 5, 7), strict=True):
        frame.to_parquet(path, index=False, row_group_size=group)
    return tuple(table_path(path) for path in paths)


def _extended(tmp_path: Path, name: str, frame: pd.DataFrame) -> PartedTable:
    """``frame`` stored as a build would extend it: a base file missing its third row, with its
    fifth changed and a row since removed, and a file of the rows added since."""
    stem = tmp_path / name
    base = frame.drop(index=2).copy()
    vector = "embedding" if "embedding" in frame else "values"
    base.at[4, vector] = base.at[4, vector] * 0
    TableWrite(pd.concat([frame.iloc[[0]].assign(chunk_id="gone#0"), base]), "tag").write(stem)
    stored = open_table(stem)
    assert stored is not None
    sources = stored.positions_of({"chunk_id": pa.array(frame["chunk_id"].tolist(), type=pa.string())})
    sources[4] = -1
    TableWrite(frame.iloc[np.flatnonzero(sources < 0)], "tag", stored, sources).write(stem)
    extended = open_table(stem)
    assert extended is not None and extended.whole_file is None and len(extended.files) == 2
    return extended


def _points(tables: PointTables, rows: int) -> list[tuple[list[dict], np.ndarray, list]]:
    return [(index_payloads(part), matrix, sparse) for part, matrix, sparse in tables.slices(rows)]


def test_parquet_row_slices_are_exact_across_row_groups(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pd.DataFrame({"n": range(23)}).to_parquet(path, index=False, row_group_size=5)
    slices = list(parquet_row_slices(path, 4))
    assert [part.num_rows for part in slices] == [4, 4, 4, 4, 4, 3]
    assert [n for part in slices for n in part.column("n").to_pylist()] == list(range(23))


@pytest.mark.parametrize("extended", [False, True])
@pytest.mark.parametrize("rows", [1, 4, 100])
def test_stored_tables_read_in_slices_give_the_points_of_the_tables_read_whole(
    tmp_path: Path, rows: int, extended: bool, monkeypatch
) -> None:
    chunks = _chunks()
    dense, sparse = _vectors(chunks)
    tables = _stored(tmp_path, chunks, dense, sparse)
    if extended:
        tables = (tables[0], _extended(tmp_path, "dense", dense), _extended(tmp_path, "sparse", sparse))
    with monkeypatch.context() as patched:  # tables that line up are never read whole
        patched.setattr(pd, "read_parquet", lambda *a, **kw: pytest.fail("read whole"))
        patched.setattr(PartedTable, "read_pandas", lambda *a, **kw: pytest.fail("read whole"))
        stored = PointTables.stored(*tables)
        list(stored.slices(rows))
    whole = PointTables.in_memory(chunks, dense, sparse)
    assert (stored.count, stored.dim) == (whole.count, whole.dim) == (len(chunks), 8)
    got, expected = _points(stored, rows), _points(whole, rows)
    assert [len(part[0]) for part in got] == [len(part[0]) for part in expected]
    for (payloads, matrix, vectors), (want_payloads, want_matrix, want_vectors) in zip(got, expected, strict=True):
        assert payloads == want_payloads
        assert np.array_equal(matrix, want_matrix)
        assert vectors == want_vectors
    assert [index_payloads(part) for part in stored.chunks(rows)] == [part[0] for part in expected]
    stored_types, stored_dim, stored_batches = point_batches(stored, rows=rows)
    whole_types, whole_dim, _ = point_batches(whole, rows=rows)
    assert (stored_types, stored_dim) == (whole_types, whole_dim)
    assert sum(len(batch[0]) for batch in stored_batches) == len(chunks)


def test_vector_tables_in_another_order_are_matched_by_chunk_id(tmp_path: Path) -> None:
    chunks = _chunks()
    dense, sparse = _vectors(chunks)
    reordered = [frame.iloc[::-1].reset_index(drop=True) for frame in (dense, sparse)]
    stored = PointTables.stored(*_stored(tmp_path, chunks, *reordered))
    expected = _points(PointTables.in_memory(chunks, dense, sparse), 6)
    got = _points(stored, 6)
    assert all(np.array_equal(a[1], b[1]) and a[2] == b[2] for a, b in zip(got, expected, strict=True))


def test_a_vector_table_without_a_chunk_is_named(tmp_path: Path) -> None:
    chunks = _chunks()
    dense, sparse = _vectors(chunks)
    stored = PointTables.stored(*_stored(tmp_path, chunks, dense.iloc[1:], sparse))
    with pytest.raises(ValueError, match="dense embedding table lacks 1 chunks"):
        list(stored.slices(4))


def test_a_qdrant_build_needs_the_sparse_table(tmp_path: Path) -> None:
    chunks = _chunks()
    dense, _ = _vectors(chunks)
    _, _, batches = point_batches(PointTables.in_memory(chunks, dense))
    with pytest.raises(ValueError, match="needs the sparse embeddings table"):
        next(batches)
