"""The ``table`` source on real Parquet (a file and a hive-partitioned folder), CSV, TSV and JSON
Lines files: column mapping, metadata values, and every row accounted for, bad ones included."""

from __future__ import annotations

import datetime
import decimal
import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from retrieval_assets.core.ingest.catalog import CatalogError, CatalogSource, ColumnMapping
from retrieval_assets.core.ingest.sources.table import detect_table, read_table


def read(path: Path, **columns: Any) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The records of a table, checking that rows are numbered 1, 2, ... under the table's path."""
    result = read_table(CatalogSource(format="table", path=str(path), columns=ColumnMapping(**columns)))
    rows = list(result.rows)
    assert [row.line_number for row in rows] == list(range(1, len(rows) + 1))
    assert {row.source for row in rows} <= {str(path)}
    return [json.loads(row.raw) for row in rows], result.stats


def reasons(records: list[dict[str, Any]]) -> list[str | None]:
    return [r["rejected"]["reason"] if "rejected" in r else None for r in records]


# --------------------------------------------------------------------------- Parquet


def test_parquet_file_auto_mapping_and_metadata_values(tmp_path: Path) -> None:
    path = tmp_path / "docs.parquet"
    table = pa.table(
        {
            "ID": ["a", "b"],
            "Title": ["First", None],
            "Body": ["Alpha text.", "Beta text."],
            "tenant": ["acme", None],
            "tags": [["x", "y"], []],
            "published": pa.array([datetime.datetime(2024, 5, 1, 12, 30), None], pa.timestamp("ms")),
            "day": [datetime.date(2024, 5, 1), None],
            "price": pa.array([decimal.Decimal("1.25"), None], pa.decimal128(6, 2)),
            "score": [float("nan"), 2.5],
            "source": [{"name": "crawl", "rank": 1}, None],
            "blob": [b"\x00\x01", b"\x02"],  # bytes: skipped
            "deep": [{"inner": {"x": 1}}, None],  # nested deeper than one level: skipped
        }
    )
    pq.write_table(table, path)
    records, stats = read(path)
    assert records == [
        {
            "id": "a",
            "title": "First",
            "text": "Alpha text.",
            "tenant_id": "acme",
            "metadata": {
                "tags": ["x", "y"],
                "published": "2024-05-01T12:30:00",
                "day": "2024-05-01",
                "price": 1.25,
                "source.name": "crawl",
                "source.rank": 1,
            },
        },
        {"id": "b", "title": "", "text": "Beta text.", "metadata": {"tags": [], "score": 2.5}},
    ]
    assert stats["rows"] == 2 and stats["documents"] == 2 and stats["quarantined"] == 0
    assert stats["files"] == 1 and stats["bytes_read"] == path.stat().st_size
    assert stats["skipped_columns"] == 2 and stats["read_seconds"] > 0


def test_parquet_explicit_mapping(tmp_path: Path) -> None:
    path = tmp_path / "docs.parquet"
    pq.write_table(
        pa.table(
            {
                "ref": [7, 8],
                "headline": ["H7", "H8"],
                "summary": ["S7", "S8"],
                "text": ["not this one", "nor this"],
                "lang": ["en", "de"],
                "year": [2020, 2021],
            }
        ),
        path,
    )
    records, _ = read(path, id="ref", title="headline", text="summary", metadata=("lang",))
    assert records == [
        {"id": "7", "title": "H7", "text": "S7", "metadata": {"lang": "en"}},
        {"id": "8", "title": "H8", "text": "S8", "metadata": {"lang": "de"}},
    ]


def test_auto_mapping_skips_named_columns_and_takes_the_first_candidate(tmp_path: Path) -> None:
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"key": ["k"], "uuid": ["u"], "abstract": ["A"], "content": ["C"], "name": ["N"]}), path)
    # id: uuid comes before key in the candidate list; text: content before abstract.
    records, _ = read(path)
    assert records == [{"id": "u", "title": "N", "text": "C", "metadata": {"key": "k", "abstract": "A"}}]
    # A column named for the text is not also taken as the id.
    records, _ = read(path, text="uuid", metadata=())
    assert records == [{"id": "k", "title": "N", "text": "u"}]


def test_partitioned_folder_reads_every_file_and_reports_a_corrupt_one(tmp_path: Path) -> None:
    root = tmp_path / "table"
    for year, lang, ids in ((2020, "en", ["a", "b"]), (2021, "de", ["c"]), (2021, "en", ["d"])):
        folder = root / f"year={year}" / f"lang={lang}"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"id": ids, "text": [f"text {i}" for i in ids]}), folder / "part-0.parquet")
    (root / "year=2020" / "lang=zz").mkdir()
    (root / "year=2020" / "lang=zz" / "part-0.parquet").write_bytes(b"not a parquet file")
    (root / "_SUCCESS").write_bytes(b"")  # writer markers are skipped, as pyarrow does
    (root / ".part-0.parquet.crc").write_bytes(b"crc")

    records, stats = read(root)
    assert [r["id"] for r in records] == ["a", "b", None, "c", "d"]  # sorted paths: lang=en < lang=zz
    assert records[0]["metadata"] == {"year": 2020, "lang": "en"}
    assert records[3]["metadata"] == {"year": 2021, "lang": "de"}
    assert records[2]["rejected"]["reason"] == "corrupt_file"
    assert "lang=zz/part-0.parquet" in records[2]["rejected"]["detail"]
    assert stats["files"] == 4 and stats["documents"] == 4 and stats["quarantined"] == 1
    assert detect_table(root) is True  # writer markers are not data files
    (root / "README.md").write_text("about this table")
    assert detect_table(root) is False


def test_a_single_unreadable_parquet_file_is_a_catalog_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 but not really")
    with pytest.raises(CatalogError, match="broken.parquet"):
        read_table(CatalogSource(format="table", path=str(path)))


def test_no_id_column_quarantines_every_row_with_the_columns(tmp_path: Path) -> None:
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"ident": ["a", "b"], "text": ["x", "y"]}), path)
    records, stats = read(path)
    assert reasons(records) == ["missing_id", "missing_id"]
    assert records[0]["rejected"]["detail"] == "no id column: the table has columns ['ident', 'text']; set columns.id"
    assert stats["quarantined"] == 2 and stats["documents"] == 0


def test_no_text_column_quarantines_every_row_as_empty_text(tmp_path: Path) -> None:
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a"], "words": ["x"]}), path)
    records, _ = read(path)
    assert records == [
        {
            "id": "a",
            "rejected": {
                "reason": "empty_text",
                "detail": "no text column: the table has columns ['id', 'words']; set columns.text",
            },
        }
    ]


@pytest.mark.parametrize("columns", [{"id": "doc_ref"}, {"text": "Body"}, {"metadata": ("id", "nope")}])
def test_a_named_column_the_table_lacks_is_a_catalog_error(tmp_path: Path, columns: dict[str, Any]) -> None:
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a"], "body": ["x"]}), path)
    source = CatalogSource(format="table", path=str(path), columns=ColumnMapping(**columns))
    with pytest.raises(CatalogError, match=r"not found; the table has columns \['id', 'body'\]"):
        read_table(source)


def test_a_named_bytes_column_cannot_be_metadata(tmp_path: Path) -> None:
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a"], "text": ["x"], "blob": [b"\x00"]}), path)
    with pytest.raises(CatalogError, match="'blob'.*cannot be metadata"):
        read_table(CatalogSource(format="table", path=str(path), columns=ColumnMapping(metadata=("blob",))))


def test_null_empty_and_mistyped_ids_and_texts(tmp_path: Path) -> None:
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a", None, "  ", "d", "e"], "text": ["x", "y", "z", None, ""]}), path)
    records, _ = read(path)
    assert reasons(records) == [None, "missing_id", "missing_id", None, None]
    # A null or empty text is passed on: cleaning keeps a title-only row and quarantines an empty one.
    assert records[3] == {"id": "d", "title": "", "text": ""}

    floats = tmp_path / "floats.parquet"
    pq.write_table(pa.table({"id": [1.0], "text": ["x"]}), floats)
    records, _ = read(floats)
    assert records[0]["rejected"] == {
        "reason": "invalid_field_type",
        "detail": "column 'id' must hold strings or integers, got float",
    }

    numbers = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"id": [1], "text": [42]}), numbers)
    records, _ = read(numbers)
    assert records[0] == {
        "id": "1",
        "rejected": {"reason": "invalid_field_type", "detail": "column 'text' must hold strings, got int"},
    }


def test_a_hundred_thousand_rows_stream_through(tmp_path: Path) -> None:
    path = tmp_path / "big.parquet"
    n = 100_000
    ids = pa.array(range(n))
    pq.write_table(
        pa.table({"id": ids, "text": pa.array([f"document {i}" for i in range(n)]), "shard": pc.bit_wise_and(ids, 7)}),
        path,
        row_group_size=25_000,
    )
    result = read_table(CatalogSource(format="table", path=str(path)))
    count = last = 0
    for row in result.rows:
        count += 1
        last = row.line_number
    assert count == last == n
    assert result.stats["rows"] == result.stats["documents"] == n


# --------------------------------------------------------------------------- CSV


def test_csv_invalid_utf8_and_malformed_rows_leave_the_rest_readable(tmp_path: Path) -> None:
    path = tmp_path / "docs.csv"
    path.write_bytes(
        b"\xef\xbb\xbfid,title,text,year\n"
        b"007,First,Alpha,2020\n"
        b'2,Second,"spans\ntwo lines",\n'
        b"3,Third\n"  # too few fields
        b"4,Fourth,bad \xff byte,2021\n"
        b",Fifth,no id,2022\n"
        b"6,Sixth,Zeta,2023\n"
    )
    records, stats = read(path)
    assert reasons(records) == ["malformed_row", None, None, "invalid_utf8", "missing_id", None]
    assert records[0]["rejected"]["detail"] == "CSV record 4 has 2 fields, the header 4: '3,Third'"
    assert records[1] == {"id": "007", "title": "First", "text": "Alpha", "metadata": {"year": "2020"}}
    assert records[2] == {"id": "2", "title": "Second", "text": "spans\ntwo lines"}  # empty year: null, dropped
    assert records[3] == {
        "id": "4",
        "rejected": {"reason": "invalid_utf8", "detail": "column(s) ['text'] not valid UTF-8"},
    }
    assert records[5]["text"] == "Zeta"
    assert stats["rows"] == 6 and stats["documents"] == 3 and stats["quarantined"] == 3


def test_gzipped_tsv_with_explicit_columns(tmp_path: Path) -> None:
    path = tmp_path / "docs.tsv.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(b"Doc\tHead\tContent\tTeam\n1\tOne\tcomma, inside\tred\n2\tTwo\tplain\tblue\n")
    records, _ = read(path, id="Doc", title="Head", text="Content", tenant="Team", metadata=())
    assert records == [
        {"id": "1", "title": "One", "text": "comma, inside", "tenant_id": "red"},
        {"id": "2", "title": "Two", "text": "plain", "tenant_id": "blue"},
    ]
    assert detect_table(path) is True


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "cannot read the CSV header"),
        (b"id,t\xffext\n1,a\n", "cannot read the CSV header"),
        (b"id,text,text\n1,a,b\n", r"names columns \['text'\] more than once"),
    ],
)
def test_an_unusable_csv_header_is_a_catalog_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "docs.csv"
    path.write_bytes(content)
    with pytest.raises(CatalogError, match=message):
        read_table(CatalogSource(format="table", path=str(path)))


# --------------------------------------------------------------------------- JSON Lines


def test_json_lines_rows_bad_lines_and_keys_seen_late(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    lines = [
        json.dumps({"doc_id": "a", "body": "Alpha", "nested": {"x": {"y": 1}}}).encode(),
        b"",
        b"{not json",
        b"[1, 2]",
        b'{"doc_id": "e", "body": "bad \xff"}',
        json.dumps({"doc_id": "f", "body": "Zeta", "title": "Late title", "lang": "en", "n": {"k": [1, 2]}}).encode(),
        json.dumps({"doc_id": True, "body": "x"}).encode(),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    records, stats = read(path)
    assert reasons(records) == [
        None,
        "blank_line",
        "malformed_json",
        "not_an_object",
        "invalid_utf8",
        None,
        "invalid_field_type",
    ]
    # "title" appears only in line 6 and is still found; "nested" is too deep and left out.
    assert records[0] == {"id": "a", "title": "", "text": "Alpha"}
    assert records[5] == {
        "id": "f",
        "title": "Late title",
        "text": "Zeta",
        "metadata": {"lang": "en", "n.k": [1, 2]},
    }
    assert stats["rows"] == 7 and stats["documents"] == 2

    # Named, a field nested too deep is passed on: cleaning quarantines the row as invalid_metadata.
    records, _ = read(path, metadata=("nested",))
    assert records[0]["metadata"] == {"nested.x": {"y": 1}}


def test_gzipped_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write('{"id": 1, "text": "one", "year": 2001}\n{"id": 2, "text": "two"}\n')
    records, _ = read(path)
    assert records == [
        {"id": "1", "title": "", "text": "one", "metadata": {"year": 2001}},
        {"id": "2", "title": "", "text": "two"},
    ]
    assert detect_table(path) is False  # JSON Lines files are left to the tool_catalog format


# --------------------------------------------------------------------------- paths


def test_missing_paths_and_unknown_suffixes_are_catalog_errors(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="table not found"):
        read_table(CatalogSource(format="table", path=str(tmp_path / "absent.parquet")))
    (tmp_path / "notes.txt").write_text("id,text\n")
    with pytest.raises(CatalogError, match="not a table file"):
        read_table(CatalogSource(format="table", path=str(tmp_path / "notes.txt")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CatalogError, match="no Parquet files"):
        read_table(CatalogSource(format="table", path=str(tmp_path / "empty")))
    assert detect_table(tmp_path / "notes.txt") is False
    assert detect_table(tmp_path / "empty") is False
    assert detect_table(tmp_path / "absent") is False
