"""The raw catalog table a build extends, and cleaning from its digests: the text of only the
rows it parses is read."""

from __future__ import annotations

import codecs
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from retrieval_assets.core.ingest.catalog import LINE_BLOCK_BYTES, CatalogSource, read_line_blocks
from retrieval_assets.core.ingest.memo import ParsedRows
from retrieval_assets.core.ingest.raw_table import (
    LIGHT_RAW_COLUMNS,
    ROW_DIGEST,
    LineRows,
    light_rows,
    raw_table,
    stored_texts,
    with_digests,
)
from retrieval_assets.core.ingest.steps import clean_catalogs, read_raw_catalogs, read_raw_sources
from retrieval_assets.core.io.parted import PartedTable, open_table
from retrieval_assets.core.io.tables import RAW_ROW_COLUMNS, write_parquet
from retrieval_assets_tests.core.ingest.stored import stored_documents


@pytest.mark.parametrize("dtype", ["string", object])
def test_row_digests_hash_the_error_flag_and_the_text(dtype) -> None:
    texts = ["", '{"_id": "a"}', "caf\u00e9 \ufffd", "x" * 5000]
    raw = pd.DataFrame(
        {
            "source": "s",
            "line_number": range(1, 5),
            "raw": pd.Series(texts, dtype=dtype),
            "utf8_error": [False, False, True, False],
        }
    )
    if dtype == "string":  # several Arrow chunks, the last a slice
        raw = pd.concat([raw.iloc[:1], raw.iloc[1:3], raw.iloc[3:]], ignore_index=True)
    expected = [
        hashlib.blake2b(bytes([int(error)]) + text.encode(), digest_size=16).digest()
        for text, error in zip(texts, raw["utf8_error"], strict=True)
    ]
    assert with_digests(raw)[ROW_DIGEST].tolist() == expected


@pytest.mark.parametrize("block_bytes", [7, LINE_BLOCK_BYTES])
def test_lines_hashed_from_their_bytes_are_digested_as_their_frame(tmp_path: Path, block_bytes: int) -> None:
    # CR LF, stray CRs, a blank line, a bad byte, a byte-order mark and no final newline.
    lines = [b'{"id": "\xc3\xa9t\xc3\xa9"}\r', b"", b"\r\r", b"  ", b'{"x": "\xe2\x82\xac\xff"}', b"{}"]
    path = tmp_path / "c.jsonl"
    path.write_bytes(codecs.BOM_UTF8 + b"\n".join(lines))
    read = LineRows("s", list(read_line_blocks(path, block_bytes)))
    frame = read.frame()
    assert read.digests().to_pylist() == with_digests(frame)[ROW_DIGEST].tolist()
    assert frame["utf8_error"].tolist() == [False] * 4 + [True, False]
    # The texts of some rows are those rows of the frame.
    chosen = np.array([1, 4, 5])
    pd.testing.assert_frame_equal(read.frame(chosen), frame.iloc[chosen].reset_index(drop=True))


def _catalog(path: Path, texts: list[str]) -> CatalogSource:
    path.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"_id": f"d{i}", "title": "", "text": text}) for i, text in enumerate(texts)]
    (path / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    return CatalogSource(format="beir", path=str(path))


def _store(source: CatalogSource, home: Path) -> tuple[pd.DataFrame, PartedTable]:
    """The source read and stored as the raw step does, over the last build's table; both read back."""
    frame = read_raw_catalogs({"main": source})[0]
    raw_table(read_raw_sources({"main": source})[0], open_table(home / "raw_catalog")).write(home / "raw_catalog")
    stored = open_table(home / "raw_catalog")
    assert stored is not None
    return frame, stored


TEXTS = [f"document number {i} about retrieval" for i in range(200)]


def test_a_changed_line_is_the_one_row_written(tmp_path: Path) -> None:
    first, table = _store(_catalog(tmp_path / "catalog", TEXTS), tmp_path)
    assert len(table.files) == 1
    # Readers see the raw columns; the digest is there for cleaning to ask for.
    pd.testing.assert_frame_equal(table.read_pandas(), first)
    assert ROW_DIGEST in table.held_columns
    changed = [*TEXTS[:50], "a new text", *TEXTS[51:]]
    frame, table = _store(_catalog(tmp_path / "catalog", changed), tmp_path)
    assert table.rows == len(TEXTS) and len(table.files) == 2
    assert table.file_rows[1] == 1
    pd.testing.assert_frame_equal(table.read_pandas(), frame)
    assert len(list(tmp_path.glob("raw_catalog.part-*.parquet"))) == 2


def test_rows_at_other_lines_are_written_again(tmp_path: Path) -> None:
    _store(_catalog(tmp_path / "catalog", TEXTS), tmp_path)
    # A line inserted first moves every row: the same texts at other line numbers are new rows.
    frame, table = _store(_catalog(tmp_path / "catalog", ["first", *TEXTS]), tmp_path)
    pd.testing.assert_frame_equal(table.read_pandas(), frame)
    assert table.whole_file is not None
    assert table.read_pandas()["line_number"].tolist() == list(range(1, len(TEXTS) + 2))


def test_a_raw_table_stored_without_digests_is_written_whole(tmp_path: Path) -> None:
    source = _catalog(tmp_path / "catalog", TEXTS)
    write_parquet(read_raw_catalogs({"main": source})[0], tmp_path / "raw_catalog.parquet")
    old = open_table(tmp_path / "raw_catalog")
    assert old is not None
    # Cleaning reads such a table whole.
    assert list(light_rows(old).columns) == list(RAW_ROW_COLUMNS)
    frame, table = _store(source, tmp_path)
    assert table.whole_file is not None and not (tmp_path / "raw_catalog.parquet").exists()
    pd.testing.assert_frame_equal(table.read_pandas(), frame)


def test_cleaning_reads_the_text_of_the_rows_it_parses_only(tmp_path: Path) -> None:
    texts = [*TEXTS[:10], "", *TEXTS[11:]]  # row 11 is quarantined: empty_text
    source = _catalog(tmp_path / "catalog", texts)
    _, table = _store(source, tmp_path)
    memo = ParsedRows(tmp_path / "memo")
    read: list[list[int]] = []

    def counted(table: PartedTable):
        def texts_of(positions: np.ndarray) -> list[str]:
            read.append(positions.tolist())
            return stored_texts(table)(positions)

        return texts_of

    first = clean_catalogs(light_rows(table), [source], memo, counted(table))
    assert read == [list(range(len(texts))), [10]]  # every row parsed, then the quarantined one
    changed = [*texts[:50], "a new text", *texts[51:]]
    frame, table = _store(_catalog(tmp_path / "catalog", changed), tmp_path)
    read.clear()
    light = light_rows(table)
    assert list(light.columns) == LIGHT_RAW_COLUMNS
    memo = ParsedRows(tmp_path / "memo")
    cleaned = clean_catalogs(light, [source], memo, counted(table))
    assert memo.parsed == 1 and read == [[50], [10]]
    assert [q.model_dump() for q in cleaned.quarantine] == [q.model_dump() for q in first.quarantine]
    assert cleaned.quarantine[0].raw == frame["raw"].iloc[10]
    plain = clean_catalogs(frame, [source])
    pd.testing.assert_frame_equal(stored_documents(cleaned, tmp_path / "artifacts"), plain.documents)
