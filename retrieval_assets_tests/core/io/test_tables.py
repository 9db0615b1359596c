"""Parquet tables: row-group-selective reads give the rows a full read filtered would give."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_assets.core.io import tables
from retrieval_assets.core.io.parted import table_path
from retrieval_assets.core.io.tables import MAX_ROW_RUNS, rows_where, take_rows, write_parquet


@pytest.fixture
def stored(tmp_path, monkeypatch) -> tuple[str, pd.DataFrame]:
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 10)
    frame = pd.DataFrame(
        {
            "chunk_id": [f"d{n}#0" for n in range(95)],
            "embedding": [np.full(3, n, dtype=np.float32) for n in range(95)],
        }
    )
    path = tmp_path / "dense.parquet"
    write_parquet(frame, path)
    return str(path), frame


def test_tables_are_written_in_row_groups(stored) -> None:
    path, _ = stored
    assert pq.ParquetFile(path).num_row_groups == 10


@pytest.mark.parametrize("wanted", [["d3#0"], ["d94#0", "d3#0", "d40#0", "d41#0"], [], ["d3#0", "unknown"]])
def test_only_the_wanted_rows_come_back_in_file_order(stored, wanted) -> None:
    path, frame = stored
    expected = pd.read_parquet(path, dtype_backend="pyarrow")
    expected = expected[expected["chunk_id"].isin(wanted)].reset_index(drop=True)
    got = table_path(Path(path)).read_where("chunk_id", wanted).to_pandas(types_mapper=pd.ArrowDtype)
    pd.testing.assert_frame_equal(got, expected)
    assert got["chunk_id"].tolist() == [c for c in frame["chunk_id"] if c in wanted]


def test_only_the_row_groups_holding_them_are_decoded(stored, monkeypatch) -> None:
    path, _ = stored
    read = []
    original = pq.ParquetFile.read_row_groups
    monkeypatch.setattr(
        pq.ParquetFile,
        "read_row_groups",
        lambda self, groups, **kw: read.append(groups) or original(self, groups, **kw),
    )
    table_path(Path(path)).read_where("chunk_id", ["d94#0", "d3#0", "d5#0"])
    assert read == [[0, 9]]


def test_a_selection_without_its_key_column_is_refused(stored) -> None:
    path, _ = stored
    with pytest.raises(ValueError, match="selects on 'chunk_id'"):
        table_path(Path(path)).read_where("chunk_id", ["d3#0"], columns=["embedding"])


def test_an_empty_frame_keeps_its_dtypes_through_parquet(tmp_path) -> None:
    frame = tables.empty_frame({"chunk_id": "string", "doc_key": "uint64", "line_number": "Int64"})
    write_parquet(frame, tmp_path / "empty.parquet")
    read = pd.read_parquet(tmp_path / "empty.parquet")
    assert len(read) == 0
    assert read.dtypes.astype(str).to_dict() == {"chunk_id": "string", "doc_key": "uint64", "line_number": "Int64"}


def _mixed(rows: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "chunk_id": pd.Series([f"d{n}" if n % 7 else None for n in range(rows)], dtype="string"),
            "ordinal": pd.Series([n if n % 5 else None for n in range(rows)], dtype="Int64"),
            "embedding": [np.full(2, n, dtype=np.float32) for n in range(rows)],
        }
    )


def test_a_table_is_converted_one_row_group_at_a_time_and_reads_back_whole(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 10)
    written: list[int] = []
    write_table = pq.ParquetWriter.write_table

    def counted(self, table, **kw):
        written.append(len(table))
        return write_table(self, table, **kw)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", counted)
    frame = _mixed(35)
    write_parquet(frame, tmp_path / "t.parquet")
    assert written == [10, 10, 10, 5]
    read = pd.read_parquet(tmp_path / "t.parquet")
    pd.testing.assert_frame_equal(read.drop(columns="embedding"), frame.drop(columns="embedding"))
    assert [v.tolist() for v in read["embedding"]] == [v.tolist() for v in frame["embedding"]]


def test_a_column_of_nulls_in_the_first_row_group_is_written_whole(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 10)
    frame = pd.DataFrame({"n": range(25), "extra": [None] * 10 + [[f"x{n}"] for n in range(15)]})
    write_parquet(frame, tmp_path / "t.parquet")
    read = pd.read_parquet(tmp_path / "t.parquet")
    assert read["extra"].iloc[:10].isna().all()
    assert [list(v) for v in read["extra"].iloc[10:]] == frame["extra"][10:].tolist()
    assert pq.ParquetFile(tmp_path / "t.parquet").num_row_groups == 3


def test_slices_of_a_stored_table_are_let_go_as_they_are_read(tmp_path, monkeypatch) -> None:
    # 40 row groups of 20 random vectors of 1,024 floats: 3.3 MB in all, 82 KB per group.
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 20)
    rows = 800
    vectors = np.random.default_rng(0).random((rows, 1024), dtype=np.float32)
    write_parquet(pd.DataFrame({"embedding": list(vectors)}), tmp_path / "dense.parquet")
    del vectors
    gc.collect()
    # What earlier tests of the process still hold is not this read's.
    before = pa.total_allocated_bytes()
    held = []
    seen = 0
    for part in tables.parquet_row_slices(tmp_path / "dense.parquet", 40, ["embedding"]):
        seen += part.num_rows
        held.append(pa.total_allocated_bytes() - before)
    assert seen == rows
    # pyarrow holds about one slice (0.7 MB measured); pre-buffered, it held 5.4 MB for this file
    # and, for 200k stored vectors, every column chunk read so far.
    assert max(held) < 2_000_000, held


def test_rows_taken_in_runs_are_slices_of_the_frame_and_equal_a_take() -> None:
    frame = pd.DataFrame({"text": [f"text {n}" for n in range(1000)], "n": np.arange(1000)}, index=np.arange(1000) * 2)
    frame["text"] = frame["text"].astype("string[pyarrow]")
    # A delta's order: most rows in place, one document's rows gone, another's moved to the end.
    runs = np.r_[np.arange(0, 400), np.arange(410, 1000), np.arange(400, 405)]
    scattered = np.random.default_rng(0).permutation(1000)[:600]
    for positions in (runs, scattered, np.arange(1000), np.array([], dtype=np.int64)):
        pd.testing.assert_frame_equal(take_rows(frame, positions), frame.iloc[positions])
    taken = take_rows(frame, runs)["text"].array.__arrow_array__().chunks
    source = frame["text"].array.__arrow_array__().chunks[0]
    # The text of the first run is the frame's own buffer, not a copy.
    assert len(taken) == 3 and taken[0].buffers()[2].address == source.buffers()[2].address
    assert len(np.flatnonzero(np.diff(scattered) != 1)) >= MAX_ROW_RUNS  # taken at once instead


def test_vector_columns_are_written_as_arrow_would_write_them(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 10)
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(
        {
            "chunk_id": pd.Series([f"d{n}#0" for n in range(35)], dtype="string"),
            "embedding": [rng.random(4, dtype=np.float32) for _ in range(35)],
            "indices": [np.arange(n % 5, dtype=np.int32) for n in range(35)],  # empty ones included
            "values": [rng.random(n % 5).astype(np.float32) for n in range(35)],
            "note": [None if n % 3 else f"note {n}" for n in range(35)],
        }
    )
    write_parquet(frame, tmp_path / "fast.parquet")
    frame.to_parquet(tmp_path / "arrow.parquet", index=False)
    fast, arrow = pq.read_table(tmp_path / "fast.parquet"), pq.read_table(tmp_path / "arrow.parquet")
    assert fast.schema.equals(arrow.schema) and fast.equals(arrow)
    assert pq.ParquetFile(tmp_path / "fast.parquet").num_row_groups == 4
    # A column that is not only vectors (a list among the arrays) is converted by Arrow as before.
    frame.loc[20, "embedding"] = [0.5, 0.5, 0.5, 0.5]  # type: ignore[call-overload]
    write_parquet(frame, tmp_path / "mixed.parquet")
    assert pq.read_table(tmp_path / "mixed.parquet")["embedding"][20].as_py() == [0.5] * 4


def test_tables_are_written_uncompressed_with_dictionaries_only_for_repeating_columns(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 10)
    frame = pd.DataFrame(
        {
            "chunk_id": pd.Series([f"d{n}#0" for n in range(35)], dtype="string"),  # distinct
            "tenant_id": pd.Series(["alpha", "beta"] * 17 + ["alpha"], dtype="string"),  # repeating
            "indices": [np.arange(n % 5, dtype=np.int32) for n in range(35)],
            "embedding": [np.full(3, n, dtype=np.float32) for n in range(35)],
        }
    )
    write_parquet(frame, tmp_path / "t.parquet")
    metadata = pq.ParquetFile(tmp_path / "t.parquet").metadata
    chunks = [metadata.row_group(g).column(c) for g in range(metadata.num_row_groups) for c in range(4)]
    assert {chunk.compression for chunk in chunks} == {"UNCOMPRESSED"}
    with_dictionary = {chunk.path_in_schema for chunk in chunks if chunk.has_dictionary_page}
    assert with_dictionary == {"tenant_id"}
    assert pq.read_table(tmp_path / "t.parquet").equals(pa.Table.from_pandas(frame, preserve_index=False))


@pytest.mark.parametrize("apart", [64, 2], ids=["a chunk at a time", "chunks joined"])
def test_scattered_rows_of_a_table_read_in_row_groups_are_taken_a_chunk_at_a_time(tmp_path, monkeypatch, apart) -> None:
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 50)
    monkeypatch.setattr(tables, "MAX_CHUNKS_TAKEN_APART", apart)
    rows = 1000
    frame = pd.DataFrame(
        {
            "text": pd.Series([None if n % 7 == 0 else f"text {n}" for n in range(rows)], dtype="string"),
            "count": pd.Series(range(rows), dtype="int64[pyarrow]"),
            "n": np.arange(rows),
            "flag": pd.Series([n % 3 == 0 if n % 5 else None for n in range(rows)], dtype="boolean"),
            "embedding": [np.full(2, n, dtype=np.float32) for n in range(rows)],
        }
    )
    write_parquet(frame, tmp_path / "t.parquet")
    stored = pd.read_parquet(tmp_path / "t.parquet")
    assert stored["text"].array.__arrow_array__().num_chunks == rows // 50
    rng = np.random.default_rng(2)
    # Sorted and unsorted, with repeats, past MAX_ROW_RUNS runs; then a few rows by a mask.
    for positions in (np.sort(rng.choice(rows, 600)), rng.choice(rows, 600), rng.permutation(rows)):
        taken = take_rows(stored, positions)
        expected = stored.iloc[positions]
        pd.testing.assert_frame_equal(taken.drop(columns="embedding"), expected.drop(columns="embedding"))
        assert all(np.array_equal(a, b) for a, b in zip(taken["embedding"], expected["embedding"], strict=True))
    mask = np.zeros(rows, dtype=bool)
    mask[[3, 480, 999]] = True
    few = rows_where(stored, mask)
    pd.testing.assert_frame_equal(few.drop(columns="embedding"), stored[mask].drop(columns="embedding"))
    with pytest.raises(IndexError):
        take_rows(stored, np.r_[np.arange(0, 2 * MAX_ROW_RUNS, 2), rows])
