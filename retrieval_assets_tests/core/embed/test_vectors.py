"""Embedding tables: vectors taken by chunk id, from numpy cells or Arrow lists alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from retrieval_assets.core.embed.vectors import (
    dense_dim,
    dense_matrices,
    dense_matrix,
    dense_values,
    sparse_slices,
    sparse_values,
    sparse_vectors,
)
from retrieval_assets.core.models import SparseVector

IDS = ["a#0", "b#0", "c#0", "d#0"]


def _tables(tmp_path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(7)
    dense = pd.concat([pd.DataFrame({"chunk_id": IDS}), dense_values(rng.random((4, 6)))], axis=1)
    sparse_rows = [SparseVector(indices=[1, 5 + n], values=[0.5, 0.25 * n]) for n in range(4)]
    sparse = pd.concat([pd.DataFrame({"chunk_id": IDS}), sparse_values(sparse_rows)], axis=1)
    return dense, sparse


@pytest.mark.parametrize("row_group_rows", [None, 3], ids=["one row group", "row groups of 3"])
@pytest.mark.parametrize("wanted", [["c#0", "a#0"], IDS[::-1], ["b#0"]])
def test_arrow_and_numpy_tables_give_the_same_vectors(tmp_path: Path, wanted: list[str], row_group_rows) -> None:
    dense, sparse = _tables(tmp_path)
    dense.to_parquet(tmp_path / "dense.parquet", row_group_size=row_group_rows)
    sparse.to_parquet(tmp_path / "sparse.parquet", row_group_size=row_group_rows)
    arrow_dense = pd.read_parquet(tmp_path / "dense.parquet", dtype_backend="pyarrow")
    arrow_sparse = pd.read_parquet(tmp_path / "sparse.parquet", dtype_backend="pyarrow")
    assert isinstance(arrow_dense["embedding"].dtype, pd.ArrowDtype)

    expected = np.vstack([dense["embedding"][IDS.index(chunk_id)] for chunk_id in wanted])
    for table in (dense, arrow_dense):
        matrix = dense_matrix(table, wanted)
        assert matrix.dtype == np.float32 and np.array_equal(matrix, expected)
    assert sparse_vectors(arrow_sparse, wanted) == sparse_vectors(sparse, wanted)
    assert sparse_vectors(sparse, wanted)[0].indices == [1, 5 + IDS.index(wanted[0])]


def test_unknown_ids_and_ragged_vectors_are_errors(tmp_path: Path) -> None:
    dense, _ = _tables(tmp_path)
    with pytest.raises(ValueError, match="lacks 1 chunks"):
        dense_matrix(dense, ["a#0", "zz#0"])
    ragged = dense.assign(embedding=[np.ones(6, np.float32)] * 3 + [np.ones(5, np.float32)])
    ragged.to_parquet(tmp_path / "ragged.parquet")
    with pytest.raises(ValueError, match="mixes vector lengths"):
        dense_matrix(pd.read_parquet(tmp_path / "ragged.parquet", dtype_backend="pyarrow"), IDS)


@pytest.mark.parametrize("rows", [1, 3, 4, 10])
def test_slices_are_the_whole_selection_in_order(tmp_path: Path, rows: int) -> None:
    dense, sparse = _tables(tmp_path)
    dense.to_parquet(tmp_path / "dense.parquet", row_group_size=3)
    arrow_dense = pd.read_parquet(tmp_path / "dense.parquet", dtype_backend="pyarrow")
    wanted = ["d#0", "a#0", "c#0", "b#0"]
    for table in (dense, arrow_dense):
        slices = list(dense_matrices(table, wanted, rows))
        assert [len(part) for part in slices] == [len(wanted[i : i + rows]) for i in range(0, len(wanted), rows)]
        assert np.array_equal(np.vstack(slices), dense_matrix(table, wanted))
        assert dense_dim(table) == 6 and dense_dim(table.head(0)) == 0
    assert [v for part in sparse_slices(sparse, wanted, rows) for v in part] == sparse_vectors(sparse, wanted)
    with pytest.raises(ValueError, match="lacks 1 chunks"):
        list(dense_matrices(dense, ["a#0", "zz#0"], rows))
