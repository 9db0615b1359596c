"""Catalog loading, text cleaning and quarantine, on hostile and on real bundled inputs."""

from __future__ import annotations

import codecs
import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from retrieval_assets.core.ingest import catalog as catalog_module
from retrieval_assets.core.ingest.catalog import (
    LINE_BLOCK_BYTES,
    CatalogError,
    CatalogSource,
    RawRow,
    load_gold,
    load_raw_rows,
    read_line_blocks,
    read_raw_rows,
)
from retrieval_assets.core.ingest.cleaning import QuarantineReason, clean_rows, clean_text
from retrieval_assets.core.ingest.raw_table import LineRows
from retrieval_assets.core.io.tables import (
    QUARANTINE_COLUMNS,
    documents_to_frame,
    frame_to_documents,
    frame_to_raw_rows,
    quarantine_to_frame,
    raw_rows_to_frame,
)
from retrieval_assets.paths import BUNDLED_DATA

VALID_TOOL = {
    "id": "t1",
    "name": "Tool One",
    "description": "Aligns short reads.",
    "keywords": ["alignment", "reads", "alignment"],
    "metadata": {
        "license": "MIT",
        "stars": 12,
        "languages": ["Python", "C"],
        "links": {"home": "https://example.org", "mirrors": ["a", "b"]},
        "title": "collides with a payload field",
        "retired": None,
    },
    "relations": {"requires": ["t2", 7]},
}


def _line(obj: object) -> bytes:
    return json.dumps(obj).encode("utf-8")


def _tool(**fields: object) -> bytes:
    return _line({"id": "x", "name": "X", "description": "Some text.", **fields})


def _write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _clean_lines(tmp_path: Path, lines: list[bytes], fmt: str = "tool_catalog", **kwargs: object):
    rows = list(read_raw_rows(_write(tmp_path / "catalog.jsonl", lines)))
    result = clean_rows(rows, fmt, **kwargs)
    assert len(rows) == len(result.documents) + len(result.quarantine)
    return result


HOSTILE_LINES: list[tuple[bytes, str | None]] = [
    (_line(VALID_TOOL), None),
    (b"", "blank_line"),
    (b"  \t ", "blank_line"),
    (b'{"id": "broken", "name": ', "malformed_json"),
    (b'{"id": "bad-bytes", "name": "Bad \xff\xfe", "description": "x"}', "invalid_utf8"),
    (_tool(id="ctl", description="line\u0000one\u0007 two\u001b"), None),
    (b"[1, 2, 3]", "not_an_object"),
    (_line({"name": "No id", "description": "x"}), "missing_id"),
    (_tool(id="  "), "missing_id"),
    (_tool(id="t1", name="Tool One", description="Something else entirely."), "duplicate_id"),
    (_line(VALID_TOOL), "duplicate_id"),
    (_tool(id="empty", description=""), "empty_text"),
    (_tool(id="blank", description=" \n\t \u0007"), "empty_text"),
    (_tool(id="nodesc", description=None), "empty_text"),
    (_tool(id=["a"]), "invalid_field_type"),
    (_tool(id=1.5), "invalid_field_type"),
    (_tool(id=True), "invalid_field_type"),
    (_tool(id="n1", name=5), "invalid_field_type"),
    (_line({"id": "n2", "description": "x"}), "invalid_field_type"),
    (_tool(id="d1", description=["x"]), "invalid_field_type"),
    (_tool(id="k1", keywords="a, b"), "invalid_field_type"),
    (_tool(id="k2", keywords=["a", 1]), "invalid_field_type"),
    (_tool(id="tn", tenant_id=3), "invalid_field_type"),
    (_tool(id="m1", metadata="license: MIT"), "invalid_field_type"),
    (_tool(id="r1", relations=["t1"]), "invalid_field_type"),
    (_tool(id="r2", relations={"requires": "t1"}), "invalid_field_type"),
    (_tool(id="long", description="word " * 700), "text_too_long"),
    (_tool(id="deep", metadata={"a": {"b": {"c": 1}}}), "invalid_metadata"),
    (_tool(id="deeplist", metadata={"a": [[1]]}), "invalid_metadata"),
    (_tool(id="clash", metadata={"a.b": 1, "a": {"b": 2}}), "invalid_metadata"),
    (_tool(id="vec", **{"embedding:BAAI/bge-small-en-v1.5": [0.0, 0.0]}), "invalid_vector"),
]


@pytest.fixture
def hostile(tmp_path: Path):
    return _clean_lines(tmp_path, [line for line, _ in HOSTILE_LINES], max_text_chars=3_000)


# Reasons only files and the Anthology give (tests under sources/).
SOURCE_KIND_REASONS = {
    QuarantineReason.UNSUPPORTED_FORMAT,
    QuarantineReason.FILE_TOO_LARGE,
    QuarantineReason.UNREADABLE_FILE,
    QuarantineReason.CORRUPT_FILE,
    QuarantineReason.ENCRYPTED_FILE,
    QuarantineReason.NO_TEXT_LAYER,
    QuarantineReason.MISSING_ABSTRACT,
    QuarantineReason.MALFORMED_ROW,
}


def test_every_quarantine_reason_occurs_and_rows_balance(hostile) -> None:
    line_reasons = {reason.value for reason in QuarantineReason if reason not in SOURCE_KIND_REASONS}
    assert {q.reason for q in hostile.quarantine} == line_reasons
    assert [d.doc_id for d in hostile.documents] == ["t1", "ctl"]
    assert hostile.stats.rows_in == len(HOSTILE_LINES)
    assert hostile.stats.rows_kept == 2
    assert hostile.stats.rows_quarantined == len(HOSTILE_LINES) - 2
    assert sum(hostile.stats.by_reason.values()) == hostile.stats.rows_quarantined


def test_each_hostile_line_gets_its_expected_reason(hostile) -> None:
    by_line = {q.line_number: q.reason for q in hostile.quarantine}
    for line_number, (_, expected) in enumerate(HOSTILE_LINES, start=1):
        assert by_line.get(line_number) == expected, f"line {line_number}"


def test_quarantine_records_explain_themselves(hostile) -> None:
    records = {(q.line_number, q.reason): q for q in hostile.quarantine}
    different, identical = records[(10, "duplicate_id")], records[(11, "duplicate_id")]
    assert different.doc_id == identical.doc_id == "t1"
    assert "line 1" in different.detail and "different" in different.detail
    assert "line 1" in identical.detail and "identical" in identical.detail
    assert "\ufffd" in records[(5, "invalid_utf8")].raw
    too_long = records[(27, "text_too_long")]
    assert too_long.doc_id == "long" and len(too_long.raw) == 2_000
    assert "deeper" in records[(28, "invalid_metadata")].detail
    assert all(q.source.endswith("catalog.jsonl") for q in hostile.quarantine)


def test_tool_document_mapping(hostile) -> None:
    tool, control = hostile.documents
    assert tool.title == "Tool One"
    assert tool.text == "Aligns short reads.\nKeywords: alignment, reads"
    assert tool.tenant_id == "default"
    assert tool.metadata == {
        "keywords": ["alignment", "reads"],
        "license": "MIT",
        "stars": 12,
        "languages": ["Python", "C"],
        "links.home": "https://example.org",
        "links.mirrors": ["a", "b"],
        "meta_title": "collides with a payload field",
        "relations.requires": ["t2", "7"],
    }
    assert control.text == "lineone two"


def test_row_tenant_overrides_source_tenant(tmp_path: Path) -> None:
    result = _clean_lines(tmp_path, [_tool(id="a"), _tool(id="b", tenant_id="acme")], tenant_id="lab")
    assert [d.tenant_id for d in result.documents] == ["lab", "acme"]


def test_beir_rows(tmp_path: Path) -> None:
    lines = [
        _line({"_id": 5, "title": "Int id", "text": "Body.", "metadata": {"year": 2020, "evidence": [{"s": 1}]}}),
        _line({"_id": "title-only", "title": "Only a title", "text": ""}),
        _line({"_id": "nothing", "title": " ", "text": "\n"}),
        _line({"_id": "bad-title", "title": 3, "text": "x"}),
    ]
    result = _clean_lines(tmp_path, lines, fmt="beir")
    first, title_only = result.documents
    assert first.doc_id == "5" and first.metadata == {"year": 2020}
    assert title_only.text == title_only.title == "Only a title"
    assert [q.reason for q in result.quarantine] == ["empty_text", "invalid_field_type"]


def test_beir_top_level_fields_become_metadata(tmp_path: Path) -> None:
    # An ACL Anthology row: authors, year (a digit string) and venue sit beside title and text.
    row = {
        "_id": "P19-1001", "title": "T", "text": "Abstract.", "authors": ["Noah A. Smith"], "year": "2019",
        "venue": ["acl"], "booktitle": "Proceedings of ACL", "nested": {"a": 1},
    }
    (document,) = _clean_lines(tmp_path, [_line(row)], fmt="beir").documents
    assert document.metadata == {
        "authors": ["Noah A. Smith"], "year": 2019, "venue": ["acl"], "booktitle": "Proceedings of ACL"
    }


def test_unknown_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown catalog format"):
        clean_rows([], "csv")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("ﬁnding ﬂow", "finding flow"),
        ("ＡＢＣ １２３", "ABC 123"),
        (r"$\alpha$-helix", "α-helix"),
        (r"\textbf{bold} and \emph{italic}", "bold and italic"),
        (r"\emph{a} \emph{b}", "a b"),
        (r"$S \times S$ pairs", "S × S pairs"),
        (r"\alpha helix", "α helix"),
        ("50% of patients", "50% of patients"),
        (r"50% of \emph{patients} paid $5 & ~3 more", "50% of patients paid $5 & ~3 more"),
        ("snake_case x^2 #1", "snake_case x^2 #1"),
        ("costs US$1.7 billion vs US$2 billion", "costs US$1.7 billion vs US$2 billion"),
        (r"stored in C:\Users\data", r"stored in C:\Users\data"),
        (r"use \verb", r"use \verb"),  # pylatexenc raises here: the original text is kept
        ("a\x00b\x07c\x1bd", "abcd"),
        ("tab\there\x0cform\u00a0nbsp", "tab here form nbsp"),
        ("  one   two  \n   three\t\n\n\n\n\nfour  ", "one two\nthree\n\nfour"),
        ("windows\r\nline\rends", "windows\nline\nends"),
        ("   ", ""),
    ],
)
def test_clean_text(raw: str, expected: str) -> None:
    assert clean_text(raw) == expected


def test_clean_text_survives_pathological_latex_nesting() -> None:
    text = r"\textbf{" * 2_000
    assert clean_text(text) == text


def test_read_raw_rows_streams_plain_and_gzip(tmp_path: Path) -> None:
    content = b'\xef\xbb\xbf{"id": "a"}\r\n\n{"id": "b"}'
    plain = tmp_path / "c.jsonl"
    plain.write_bytes(content)
    packed = tmp_path / "c.jsonl.gz"
    packed.write_bytes(gzip.compress(content))
    for path in (plain, packed):
        rows = list(read_raw_rows(path))
        assert [(r.line_number, r.raw) for r in rows] == [(1, '{"id": "a"}'), (2, ""), (3, '{"id": "b"}')]
        assert rows[0].source == str(path) and not any(r.utf8_error for r in rows)


def test_missing_catalog_files_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="not found"):
        read_raw_rows(tmp_path / "absent.jsonl")
    with pytest.raises(CatalogError, match="corpus.jsonl"):
        load_raw_rows(CatalogSource(format="beir", path=str(tmp_path)))


def _beir_dir(tmp_path: Path, qrels: str) -> Path:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text(qrels)
    queries = [{"_id": "q1", "text": "first"}, {"_id": "q2", "text": "second"}, {"_id": "q3", "text": "unjudged"}]
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return tmp_path


def test_load_gold_keeps_only_judged_queries(tmp_path: Path) -> None:
    gold = load_gold(_beir_dir(tmp_path, "query-id\tcorpus-id\tscore\nq2\td1\t1\nq1\td2\t2\nq2\td3\t0\n"))
    assert gold.queries == {"q2": "second", "q1": "first"}
    assert gold.qrels == {"q2": {"d1": 1, "d3": 0}, "q1": {"d2": 2}}


@pytest.mark.parametrize(
    ("qrels", "message"),
    [
        ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\n", r"test\.tsv:3: expected 3 columns"),
        ("q1\td1\tyes\n", r"test\.tsv:1: score 'yes' is not an integer"),
        ("q9\td1\t1\n", "missing from queries.jsonl"),
    ],
)
def test_load_gold_reports_bad_qrels(tmp_path: Path, qrels: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        load_gold(_beir_dir(tmp_path, qrels))


def test_load_gold_reports_missing_files(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"qrels file not found: .*dev\.tsv"):
        load_gold(_beir_dir(tmp_path, "q1\td1\t1\n"), split="dev")
    (tmp_path / "queries.jsonl").unlink()
    with pytest.raises(CatalogError, match="queries.jsonl"):
        load_gold(tmp_path)


def test_bundled_scifact_mini_loads_and_cleans() -> None:
    source = CatalogSource(format="beir", path=str(BUNDLED_DATA / "scifact_mini"))
    rows = list(load_raw_rows(source))
    result = clean_rows(rows, source.format, source.tenant_id)
    assert len(rows) == 600 and len(result.documents) == 600 and not result.quarantine

    gold = load_gold(BUNDLED_DATA / "scifact_mini")
    assert len(gold.queries) == 60
    assert sum(len(judged) for judged in gold.qrels.values()) == 71
    doc_ids = {doc.doc_id for doc in result.documents}
    assert all(doc_id in doc_ids for judged in gold.qrels.values() for doc_id in judged)


def test_bundled_biotools_sample_loads_and_cleans() -> None:
    source = CatalogSource(format="tool_catalog", path=str(BUNDLED_DATA / "biotools_sample" / "catalog.jsonl"))
    rows = list(load_raw_rows(source))
    result = clean_rows(rows, source.format, source.tenant_id)
    assert len(rows) == 303 and len(result.documents) + len(result.quarantine) == 303
    assert len(result.documents) >= 300
    tool = result.documents[0]
    assert tool.doc_id == "1000genomes" and tool.title == "1000Genomes"
    assert "Keywords: " in tool.text and "Genomics" in tool.metadata["keywords"]
    assert tool.metadata["tool_types"] == ["Web application", "Database portal"]


def test_frames_round_trip_and_have_columns_when_empty(hostile, tmp_path: Path) -> None:
    rows = list(read_raw_rows(_write(tmp_path / "c.jsonl", [line for line, _ in HOSTILE_LINES])))
    assert list(frame_to_raw_rows(raw_rows_to_frame(rows))) == rows

    frame = documents_to_frame(hostile.documents)
    frame.to_parquet(tmp_path / "docs.parquet")
    assert frame_to_documents(pd.read_parquet(tmp_path / "docs.parquet")) == hostile.documents

    quarantine = quarantine_to_frame(hostile.quarantine)
    assert len(quarantine) == len(hostile.quarantine)
    assert list(quarantine_to_frame([]).columns) == list(QUARANTINE_COLUMNS)
    assert list(documents_to_frame([]).columns) == [
        "doc_id", "title", "text", "tenant_id", "metadata", "structure", "vectors"
    ]
    assert frame_to_documents(documents_to_frame([])) == []
    with pytest.raises(ValueError, match="lacks columns"):
        frame_to_documents(frame.drop(columns=["text"]))


@pytest.mark.parametrize(
    ("year", "kept"),
    [("2019", 2019), (" 2019 ", 2019), ("²", "²"), ("٢٠١٩", "٢٠١٩"), ("9" * 20, None)],
)
def test_year_strings_become_integers_only_when_they_are_ascii_and_fit_64_bits(year: str, kept: object) -> None:
    record = {"_id": "y", "title": "t", "text": "some text", "metadata": {"year": year}}
    cleaned = clean_rows([RawRow(source="s", line_number=1, raw=json.dumps(record))], "beir")
    if kept is None:
        assert [q.reason for q in cleaned.quarantine] == ["invalid_metadata"]
    else:
        assert cleaned.documents[0].metadata["year"] == kept


BLOCKS_DETAIL = "each block needs text (a string), and heading (a string) and page (an integer) if given"


def _document_row(record: dict, number: int = 1) -> RawRow:
    return RawRow(source="folder", line_number=number, raw=json.dumps(record))


def test_document_records_keep_their_structure_and_rejections_their_reason() -> None:
    from retrieval_assets.core.ingest.sources.records import TextBlock, document_record, rejected_record

    blocks = [
        TextBlock(heading=None, page=1, text="  Front   matter "),
        TextBlock(heading="1 Introduction", page=1, text="We   study x."),
        TextBlock(heading="1 Introduction", page=2, text=" \n "),  # empty after cleaning: dropped
        TextBlock(heading="2 Methods", page=2, text="We measure $\\alpha$."),
    ]
    rows = [
        _document_row(document_record("a.pdf", "A paper", blocks=blocks, metadata={"format": "pdf", "pages": 2})),
        _document_row(rejected_record("scan.pdf", QuarantineReason.NO_TEXT_LAYER, "3 pages, no text"), 2),
        _document_row(document_record("b.md", "", text="plain text", tenant_id="team"), 3),
        _document_row({"id": "c", "rejected": {"reason": "no_such_reason"}}, 4),
        _document_row({"id": "d", "title": "", "blocks": [{"text": "x", "page": "3"}]}, 5),
    ]
    result = clean_rows(rows, "document")
    first, plain = result.documents
    # Each heading opens its section's text once.
    assert first.text == "Front matter\n1 Introduction\nWe study x.\n2 Methods\nWe measure α."
    assert [(s.heading, s.page, first.text[: s.length]) for s in first.structure[:1]] == [(None, 1, "Front matter")]
    assert [s.heading for s in first.structure] == [None, "1 Introduction", "2 Methods"]
    assert sum(s.length for s in first.structure) + len(first.structure) - 1 == len(first.text)
    assert first.metadata == {"format": "pdf", "pages": 2}
    assert (plain.doc_id, plain.tenant_id, plain.structure) == ("b.md", "team", [])
    assert [(q.doc_id, q.reason, q.detail) for q in result.quarantine] == [
        ("scan.pdf", "no_text_layer", "3 pages, no text"),
        ("c", "invalid_field_type", "unknown rejection {'reason': 'no_such_reason'}"),
        ("d", "invalid_field_type", BLOCKS_DETAIL),
    ]
    # The structure survives the documents frame (Parquet) both ways.
    assert frame_to_documents(documents_to_frame(result.documents)) == result.documents


def _lines_as_python_reads_them(path: Path) -> list[tuple[int, str, bool]]:
    """Each line as iterating the binary file gives it, stripped and decoded as read_raw_rows promises."""
    rows = []
    with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip(b"\r\n").removeprefix(codecs.BOM_UTF8 if number == 1 else b"")
            try:
                rows.append((number, line.decode("utf-8"), False))
            except UnicodeDecodeError:
                rows.append((number, line.decode("utf-8", errors="replace"), True))
    return rows


@pytest.mark.parametrize("searched", [1, 10**6], ids=["newlines searched for", "every byte compared"])
@pytest.mark.parametrize("block_bytes", [1, 2, 5, 13, LINE_BLOCK_BYTES])
@pytest.mark.parametrize("ending", [b"", b"\n", b"\r\n"])
@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"], ids=["mapped", "decompressed"])
def test_line_blocks_split_lines_as_a_file_iterates_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block_bytes: int, ending: bytes, searched: int, suffix: str
) -> None:
    monkeypatch.setattr(catalog_module, "SEARCHED_LINE_BYTES", searched)
    # Blank lines, CR LF and stray CRs, multi-byte characters across block edges, bad bytes in one block.
    lines = [b'{"id": "\xc3\xa9t\xc3\xa9"}\r', b"", b"\r\r", b"  ", b'{"x": "\xe2\x82\xac\xff"}', b"{}" + ending]
    content = codecs.BOM_UTF8 + b"\n".join(lines)
    path = tmp_path / f"c{suffix}"
    path.write_bytes(gzip.compress(content) if suffix.endswith(".gz") else content)
    blocks = list(read_line_blocks(path, block_bytes))
    got = [
        (number, text, error)
        for block in blocks
        for number, text, error in zip(block.line_numbers, *(c.tolist() for c in block.texts()), strict=True)
    ]
    assert got == _lines_as_python_reads_them(path)
    frame = LineRows("s", blocks).frame()
    rows = [row.model_copy(update={"source": "s"}) for row in read_raw_rows(path)]
    pd.testing.assert_frame_equal(frame, raw_rows_to_frame(rows))
