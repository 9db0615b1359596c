"""Parted tables: a table extended by a file of new rows reads as the table written whole."""

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from retrieval_assets.core.io import parted, tables
from retrieval_assets.core.io.parted import TableWrite, open_table, table_path, worth_extending
from retrieval_assets.core.io.tables import write_parquet


def _frame(ids: list[str], version: str = "a") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "chunk_id": pd.Series(ids, dtype="string"),
            "content_hash": pd.Series([f"{i}-{version}" for i in ids], dtype="string"),
            "embedding": [np.full(3, float(sum(map(ord, i))), dtype=np.float32) for i in ids],
        }
    )


def _extend(stem: Path, new: pd.DataFrame) -> TableWrite:
    """What an embedding step does: keep the base's rows of unchanged keys, add the rest."""
    base = open_table(stem)
    assert base is not None
    keys = {name: pa.array(new[name].tolist(), type=pa.string()) for name in ("chunk_id", "content_hash")}
    sources = base.positions_of(keys)
    return TableWrite(new.iloc[np.flatnonzero(sources < 0)].reset_index(drop=True), "tag", base, sources)


def _as_written(table: parted.PartedTable) -> pd.DataFrame:
    frame = table.read_pandas()
    frame["embedding"] = frame["embedding"].map(list)
    return frame


def _expected(frame: pd.DataFrame) -> pd.DataFrame:
    expected = frame.copy()
    expected["embedding"] = expected["embedding"].map(list)
    return expected


@pytest.fixture
def stem(tmp_path: Path) -> Path:
    return tmp_path / "dense_embeddings"


def test_an_extended_table_reads_as_the_new_table_and_keeps_the_base_file(
    stem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "ROW_GROUP_ROWS", 64)  # rows read by row group, across groups
    ids = [f"c{i}" for i in range(2000)]
    TableWrite(_frame(ids), "tag").write(stem)
    base = open_table(stem)
    assert base is not None and base.tag == "tag" and base.rows == 2000
    (first,) = base.paths
    inode = first.stat().st_ino
    # Rows changed, removed and added, some at the start, middle and end.
    new_ids = ["c-new0", *ids[1:500], *ids[501:1500], "c-new1", *ids[1500:], "c-new2"]
    new = _frame(new_ids)
    changed = int(np.flatnonzero(new["chunk_id"] == "c700")[0])
    new.loc[changed, "content_hash"] = "c700-b"
    new.at[changed, "embedding"] = np.zeros(3, np.float32)
    write = _extend(stem, new)
    assert len(write.frame) == 4 and write.kept == len(new_ids) - 4
    assert worth_extending(write.base, write.sources)  # type: ignore[arg-type]
    manifest = write.write(stem)
    assert manifest.name == "dense_embeddings.parts.json"
    table = open_table(stem)
    assert table is not None and len(table.files) == 2 and table.rows == len(new_ids)
    assert first.stat().st_ino == inode
    pd.testing.assert_frame_equal(_as_written(table), _expected(new))
    assert table_path(manifest).rows == len(new_ids)

    # Slices in step across pieces and files, and rows picked by key, in table order.
    for rows in (1, 7, 1000, 5000):
        joined = pa.concat_tables(list(table.row_slices(rows, ["chunk_id"]))).column(0).to_pylist()
        assert joined == new_ids
        assert all(part.num_rows == rows for part in list(table.row_slices(rows))[:-1])
    picked = table.read_where("chunk_id", {"c-new2", "c700", "c3", "c1"}, ["chunk_id", "content_hash"])
    assert picked.column("chunk_id").to_pylist() == ["c1", "c3", "c700", "c-new2"]
    assert picked.column("content_hash").to_pylist() == ["c1-a", "c3-a", "c700-b", "c-new2-a"]
    assert table.read_where("chunk_id", {"c0", "c500"}).num_rows == 0  # removed rows stay in the base file only
    # Rows picked by position, in any order and more than once, across files and row groups.
    positions = [len(new_ids) - 1, 0, changed, 1200, 0, 63, 64]
    taken = table.take(positions, ["chunk_id", "content_hash"])
    assert taken.column("chunk_id").to_pylist() == [new_ids[p] for p in positions]
    assert taken.column("content_hash").to_pylist()[2] == "c700-b"
    assert table.take([], ["chunk_id"]).num_rows == 0
    with pytest.raises(IndexError):
        table.take([len(new_ids)])


def test_a_table_written_whole_again_removes_the_files_it_no_longer_uses(stem: Path) -> None:
    write_parquet(_frame(["c1", "c2"]), stem.with_name("dense_embeddings.parquet"))
    plain = open_table(stem)
    assert plain is not None and plain.tag is None and plain.whole_file is not None
    TableWrite(_frame(["c1", "c2", "c3"]), "tag").write(stem)
    assert not stem.with_name("dense_embeddings.parquet").exists()
    _extend(stem, _frame(["c1", "c3", "c4"])).write(stem)
    TableWrite(_frame(["c9"]), "tag").write(stem)
    assert sorted(p.name.split(".")[1][:4] for p in stem.parent.iterdir()) == ["part", "part"]
    assert [p.name for p in stem.parent.iterdir() if p.suffix == ".json"] == ["dense_embeddings.parts.json"]
    table = open_table(stem)
    assert table is not None and table.read(["chunk_id"]).column(0).to_pylist() == ["c9"]


def test_a_table_of_scattered_or_mostly_unused_rows_is_not_worth_extending(stem: Path) -> None:
    ids = [f"c{i}" for i in range(400)]
    TableWrite(_frame(ids), "tag").write(stem)
    base = open_table(stem)
    assert base is not None
    every_other = _extend(stem, _frame([f"x{i}" if i % 2 else ids[i] for i in range(400)]))
    assert not worth_extending(base, every_other.sources)  # type: ignore[arg-type]
    half = _extend(stem, _frame(ids[:200]))
    assert not worth_extending(base, half.sources)  # type: ignore[arg-type]
    one = _extend(stem, _frame([*ids[:399], "x"]))
    assert worth_extending(base, one.sources)  # type: ignore[arg-type]


def test_a_table_extended_into_another_folder_links_the_files_it_keeps(tmp_path: Path) -> None:
    ids = [f"c{i}" for i in range(100)]
    TableWrite(_frame(ids), "tag").write(tmp_path / "old" / "dense_embeddings")
    write = _extend(tmp_path / "old" / "dense_embeddings", _frame([*ids, "c-new"]))
    write.write(tmp_path / "new" / "dense_embeddings")
    table = open_table(tmp_path / "new" / "dense_embeddings")
    assert table is not None and table.directory == tmp_path / "new"
    assert table.read(["chunk_id"]).column(0).to_pylist() == [*ids, "c-new"]
    (base,) = (tmp_path / "old").glob("*.part-*")
    assert (tmp_path / "new" / base.name).stat().st_ino == base.stat().st_ino


def test_columns_a_table_shows_are_read_unless_others_are_named(stem: Path) -> None:
    ids = ["c1", "c2", "c3"]
    TableWrite(_frame(ids), "tag", columns=("chunk_id", "content_hash")).write(stem)
    base = open_table(stem)
    assert base is not None and base.columns == ("chunk_id", "content_hash")
    assert base.read().column_names == ["chunk_id", "content_hash"]
    assert list(base.read_pandas().columns) == ["chunk_id", "content_hash"]
    assert base.read(["embedding"]).num_rows == 3
    # Extended, the table keeps showing the same columns, whatever part a row lies in.
    write = _extend(stem, _frame(["c1", "c9", "c3"]))
    TableWrite(write.frame, "tag", write.base, write.sources, ("chunk_id",)).write(stem)
    extended = open_table(stem)
    assert extended is not None and len(extended.files) == 2
    assert extended.read().column_names == ["chunk_id"]
    assert extended.take([1, 0]).to_pydict() == {"chunk_id": ["c9", "c1"]}
    assert extended.read_where("chunk_id", {"c3"}).to_pydict() == {"chunk_id": ["c3"]}
    assert [part.num_rows for part in extended.row_slices(2)] == [2, 1]
    assert extended.read_pandas(["chunk_id", "content_hash"])["content_hash"].tolist() == ["c1-a", "c9-a", "c3-a"]
