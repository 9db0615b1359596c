"""Precomputed vectors in catalogs (docs/sources.md#precomputed-vectors): ``embedding:<model>``
fields of JSON Lines catalogs and columns of Parquet, CSV and JSON Lines tables are checked by
cleaning, kept by model name, quarantined as ``invalid_vector`` when bad, and reach the chunks of
one-chunk documents only."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from retrieval_assets.core.index.build import chunk_table
from retrieval_assets.core.ingest.catalog import CatalogSource
from retrieval_assets.core.ingest.reasons import QuarantineReason
from retrieval_assets.core.ingest.steps import chunk_frame, clean_catalog, read_raw_catalog
from retrieval_assets.core.io.tables import chunk_payloads, documents_to_frame, frame_to_chunks
from retrieval_assets.core.models import Document
from retrieval_assets.core.settings import ChunkingSettings
from retrieval_assets_tests.core.ingest.stored import stored_chunks

MODEL = "BAAI/bge-small-en-v1.5"
OTHER = "sentence-transformers/all-MiniLM-L6-v2"
FIELD, OTHER_FIELD = f"embedding:{MODEL}", f"embedding:{OTHER}"


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def _clean(path: Path, fmt: str) -> tuple[dict[str, Document], dict[str | None, tuple[str, str]]]:
    source = CatalogSource(format=fmt, path=str(path))  # type: ignore[arg-type]
    result = clean_catalog(read_raw_catalog(source), source)
    assert result.stats.rows_in == result.stats.rows_kept + result.stats.rows_quarantined
    documents = {doc.doc_id: doc for doc in result.documents}
    quarantined = {q.doc_id: (q.reason, q.detail) for q in result.quarantine}
    return documents, quarantined


def test_tool_catalog_vectors_are_kept_by_model_and_bad_ones_quarantined(tmp_path: Path) -> None:
    tools = [
        {"id": "a", "name": "A", "description": "Aligns reads.", FIELD: [0.5, -1, 2], OTHER_FIELD: [1.0, 2.0]},
        {"id": "b", "name": "B", "description": "Sorts files.", FIELD: [1, 0, 0]},
        {"id": "none", "name": "N", "description": "No vector at all.", FIELD: None},
        {"id": "short", "name": "S", "description": "Wrong length.", FIELD: [1.0, 2.0]},
        {"id": "text", "name": "T", "description": "A string.", FIELD: "[1, 2, 3]"},
        {"id": "empty", "name": "E", "description": "Empty.", FIELD: []},
        {"id": "zero", "name": "Z", "description": "Zeros.", FIELD: [0, 0, 0]},
        {"id": "word", "name": "W", "description": "A word inside.", FIELD: [1, "x", 3]},
        {"id": "flag", "name": "F", "description": "A boolean inside.", FIELD: [1, True, 3]},
        {"id": "nameless", "name": "N", "description": "No model name.", "embedding:": [1, 2, 3]},
        {"id": "huge", "name": "H", "description": "An integer beyond floats.", FIELD: [10**400, 1]},
    ]
    path = _write_jsonl(tmp_path / "tools.jsonl", tools)
    # Python's JSON reads 1e400 as an infinity, which is no finite number either.
    infinite = json.dumps({"id": "inf", "name": "I", "description": "x", FIELD: ["INF", 1]}).replace('"INF"', "1e400")
    path.write_text(path.read_text() + infinite + "\n")
    documents, quarantined = _clean(path, "tool_catalog")

    assert set(documents) == {"a", "b", "none"}
    assert documents["a"].vectors == {MODEL: [0.5, -1.0, 2.0], OTHER: [1.0, 2.0]}
    assert documents["b"].vectors == {MODEL: [1.0, 0.0, 0.0]} and documents["none"].vectors == {}
    # A vector is not metadata (it would reach every store's payload).
    assert not any(key.startswith("embedding") for doc in documents.values() for key in doc.metadata)
    assert {doc_id: reason for doc_id, (reason, _) in quarantined.items()} == dict.fromkeys(
        ["short", "text", "empty", "zero", "word", "flag", "nameless", "huge", "inf"],
        QuarantineReason.INVALID_VECTOR.value,
    )
    assert "beyond any float" in quarantined["huge"][1] and "item 0 is inf" in quarantined["inf"][1]
    assert "2 numbers, but 2 of this source's vectors" in quarantined["short"][1]
    assert "got str" in quarantined["text"][1] and "empty list" in quarantined["empty"][1]
    assert "zero" in quarantined["zero"][1] and "item 1 is str" in quarantined["word"][1]
    assert "item 1 is bool" in quarantined["flag"][1] and "names no model" in quarantined["nameless"][1]


def test_beir_vectors_are_not_metadata_and_nan_lines_are_malformed(tmp_path: Path) -> None:
    (tmp_path / "beir").mkdir()
    corpus = tmp_path / "beir" / "corpus.jsonl"
    lines = [
        json.dumps({"_id": "1", "title": "T", "text": "Some abstract.", FIELD: [0.1, 0.2], "year": 2020}),
        '{"_id": "2", "text": "NaN is not JSON.", "' + FIELD + '": [NaN, 0.2]}',
    ]
    corpus.write_text("\n".join(lines) + "\n")
    documents, quarantined = _clean(tmp_path / "beir", "beir")
    assert documents["1"].vectors == {MODEL: [0.1, 0.2]} and documents["1"].metadata == {"year": 2020}
    assert quarantined[None][0] == QuarantineReason.MALFORMED_JSON.value


def test_parquet_csv_and_jsonl_tables_carry_vector_columns(tmp_path: Path) -> None:
    parquet = tmp_path / "rows.parquet"
    vectors = [[0.25, -0.5, 1.0], [1.0, 2.0, 3.0], [math.nan, 1.0, 1.0], None, [0.0, 0.0, 0.0], [1.0, 2.0]]
    pq.write_table(
        pa.table(
            {
                "id": ["p1", "p2", "nan", "null", "zero", "short"],
                "text": ["first row", "second row", "third row", "fourth row", "fifth row", "sixth row"],
                "year": [2001, 2002, 2003, 2004, 2005, 2006],
                FIELD: pa.array(vectors, type=pa.list_(pa.float32())),
            }
        ),
        parquet,
    )
    documents, quarantined = _clean(parquet, "table")
    assert set(documents) == {"p1", "p2", "null"}
    assert documents["p1"].vectors == {MODEL: [0.25, -0.5, 1.0]} and documents["null"].vectors == {}
    assert documents["p1"].metadata == {"year": 2001}
    assert {doc_id: reason for doc_id, (reason, _) in quarantined.items()} == dict.fromkeys(
        ["nan", "zero", "short"], QuarantineReason.INVALID_VECTOR.value
    )
    assert "item 0 is null (NaN" in quarantined["nan"][1]

    csv = tmp_path / "rows.csv"
    csv.write_text(
        f'id,text,"{FIELD}"\n'
        'c1,first row,"[0.5, 0.5, 1]"\n'
        "c2,second row,\n"
        'c3,third row,"0.5, 0.5, 1"\n'
        'c4,fourth row,"[0.5, ""a"", 1]"\n'
    )
    documents, quarantined = _clean(csv, "table")
    assert documents["c1"].vectors == {MODEL: [0.5, 0.5, 1.0]} and documents["c2"].vectors == {}
    assert quarantined["c3"][0] == quarantined["c4"][0] == QuarantineReason.INVALID_VECTOR.value
    assert "JSON array" in quarantined["c3"][1]

    jsonl = _write_jsonl(
        tmp_path / "rows.jsonl",
        [{"doc_id": "j1", "body": "a row", FIELD: [1, 2]}, {"doc_id": "j2", "body": "text", FIELD: "[1, 2]"}],
    )
    documents, quarantined = _clean(jsonl, "table")
    assert documents["j1"].vectors == {MODEL: [1.0, 2.0]}
    assert quarantined["j2"][0] == QuarantineReason.INVALID_VECTOR.value  # JSON Lines holds real lists


def test_vectors_reach_one_chunk_documents_only_and_never_a_payload(tmp_path: Path) -> None:
    short = Document(doc_id="short", title="Short", text="A short text.", vectors={MODEL: [1.0, 2.0]})
    long = Document(doc_id="long", title="Long", text=" ".join(["word"] * 60), vectors={MODEL: [3.0, 4.0]})
    plain = Document(doc_id="plain", text="No vector.")
    settings = ChunkingSettings(kind="sliding_window", window_words=25, overlap_words=0)
    documents = documents_to_frame([short, long, plain])
    chunks = chunk_frame(documents, settings)

    by_doc = {doc_id: group for doc_id, group in chunks.groupby("doc_id")}
    assert json.loads(by_doc["short"]["vectors"].iloc[0]) == {MODEL: [1.0, 2.0]}
    assert len(by_doc["long"]) > 1 and all(json.loads(v) == {MODEL: None} for v in by_doc["long"]["vectors"])
    assert by_doc["plain"]["vectors"].isna().all()
    assert [chunk.vectors for chunk in frame_to_chunks(by_doc["short"])] == [{MODEL: [1.0, 2.0]}]
    assert all("vectors" not in payload for payload in chunk_payloads(chunks))

    # The chunk memo keys a document by its vectors too: a new vector with the same text reaches its chunk.
    stored_chunks(documents, settings, tmp_path / "memo")
    changed = documents_to_frame([short.model_copy(update={"vectors": {MODEL: [5.0, 6.0]}}), long, plain])
    again, made = stored_chunks(changed, settings, tmp_path / "memo")
    assert (made.documents_chunked, made.documents_reused) == (1, 2)
    assert json.loads(again.loc[again["doc_id"] == "short", "vectors"].iloc[0]) == {MODEL: [5.0, 6.0]}
    # ... and its row changes, so a delta build re-indexes that chunk (and only that one).
    before, after = chunk_table(chunks), chunk_table(again)
    differs = before["row_hash"].to_numpy() != after["row_hash"].to_numpy()
    assert list(before["chunk_id"]) == list(after["chunk_id"]) and list(before["chunk_id"][differs]) == [
        "default/short#0"
    ]
