"""Curated gold files: CSV and JSON Lines, their errors, and the append log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval_assets.core.evaluation.gold.curated import append_curated, curated_query_id, load_curated
from retrieval_assets.core.ingest.catalog import CatalogError


def test_csv_rows_of_one_query_make_one_query(tmp_path: Path) -> None:
    path = tmp_path / "gold.csv"
    path.write_text(
        'query,expected_id,grade\n"reset a password, quickly",doc-1,2\n"Reset a   PASSWORD, quickly",doc-2,\n'
        "how to rotate keys,doc-3,1\n"
    )
    gold = load_curated(path)
    qid = curated_query_id("reset a password, quickly")
    assert qid.startswith("cq-") and qid == curated_query_id("  Reset a PASSWORD,  quickly ")
    other = curated_query_id("how to rotate keys")
    assert gold.queries == {qid: "reset a password, quickly", other: "how to rotate keys"}
    assert gold.qrels[qid] == {"doc-1": 2, "doc-2": 1}


def test_json_lines_with_query_ids(tmp_path: Path) -> None:
    path = tmp_path / "gold.jsonl"
    rows = [
        {"query_id": "q1", "query": "first", "expected_id": "d1", "grade": 2},
        {"query_id": "q1", "query": "First", "expected_id": "d2"},
        {"query": "second", "expected_id": "d3", "grade": "3"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n\n" + json.dumps(rows[2]) + "\n")
    gold = load_curated(path)
    assert gold.queries == {"q1": "first", curated_query_id("second"): "second"}
    assert gold.qrels == {"q1": {"d1": 2, "d2": 1}, curated_query_id("second"): {"d3": 3}}


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("gold.csv", "question,expected_id\nx,d1\n", r"gold.csv:1: .*lacks the column\(s\) query"),
        ("gold.csv", "query,expected_id,grade\nx,d1,1\ny,d2,high\n", r"gold.csv:3: grade 'high' is not an integer"),
        ("gold.csv", "query,expected_id\nx,d1\n  ,d2\n", r"gold.csv:3: empty query"),
        ("gold.csv", "query,expected_id\nx\n", r"gold.csv:2: empty expected_id"),
        ("gold.csv", "query,expected_id\n", r"no curated queries"),
        ("gold.csv", "query,expected_id\na, b,d1\n", r"gold.csv:2: more fields than the header"),
        ("gold.jsonl", '{"query": "x", "expected_id": "d"}\n{"query": "y"}\n', r"gold.jsonl:2: missing expected_id"),
        ("gold.jsonl", '{"query": "x", "expected_id": "d", "grade": 1.5}\n', r"gold.jsonl:1: grade 1.5 is not"),
        ("gold.jsonl", "{oops\n", r"gold.jsonl:1: not JSON"),
        ("gold.jsonl", '{"query_id": "q", "query": "a", "expected_id": "d"}\n{"query_id": "q", "query": "b", '
         '"expected_id": "d"}\n', r"gold.jsonl:2: query id q was given to another query"),
        ("gold.txt", "x", r"must be .csv"),
    ],
)
def test_bad_rows_name_the_file_and_line(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(CatalogError, match=message):
        load_curated(path)


def test_appended_judgements_read_back(tmp_path: Path) -> None:
    path = tmp_path / "new" / "gold.csv"
    tricky = 'a "quoted", two-line\nquery'
    append_curated(path, tricky, "doc-1")
    append_curated(path, tricky, "doc-2", grade=2)
    append_curated(path, "plain", "doc-3")
    assert path.read_text().splitlines()[0] == "query,expected_id,grade"
    gold = load_curated(path)
    assert gold.queries[curated_query_id(tricky)] == tricky
    assert gold.qrels == {curated_query_id(tricky): {"doc-1": 1, "doc-2": 2}, curated_query_id("plain"): {"doc-3": 1}}

    lines = tmp_path / "gold.jsonl"
    lines.write_text('{"query": "x", "expected_id": "d1"}')  # no newline at the end
    append_curated(lines, "x", "d2", grade=3)
    assert load_curated(lines).qrels == {curated_query_id("x"): {"d1": 1, "d2": 3}}

    own_header = tmp_path / "short.csv"
    own_header.write_text("expected_id,query\nd1,x\n")
    append_curated(own_header, "y", "d2")
    assert load_curated(own_header).qrels[curated_query_id("y")] == {"d2": 1}
    with pytest.raises(CatalogError, match="no grade column"):
        append_curated(own_header, "y", "d3", grade=2)
    with pytest.raises(CatalogError, match="empty query"):
        append_curated(path, "  ", "doc-1")
    with pytest.raises(CatalogError, match="empty expected_id"):
        append_curated(path, "q", "")
