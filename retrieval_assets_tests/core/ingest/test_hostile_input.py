"""The hostile-input corpus: every line is kept or quarantined with the expected reason, nothing crashes.

``data/hostile_catalog.jsonl`` is written by ``data/make_hostile_catalog.py``; its 10 MB row is
made at test time. The corpus goes through ``clean_rows`` and through the Dagster ingestion assets.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest
from dagster import materialize

from retrieval_assets import console
from retrieval_assets.core.ingest.catalog import CatalogSource, RawRow, read_raw_rows
from retrieval_assets.core.ingest.cleaning import QuarantineReason, clean_rows
from retrieval_assets.core.ingest.steps import clean_catalog, read_raw_catalog
from retrieval_assets.defs.assets.ingest import chunks, cleaned_documents, raw_catalog
from retrieval_assets.defs.io_manager import ParquetIOManager, stored_value
from retrieval_assets.defs.resources import CatalogResource, ChunkingResource, IndexStorageResource
from retrieval_assets_tests import TEST_DATA
from retrieval_assets_tests.builds import build_catalog
from retrieval_assets_tests.core.ingest.test_catalog_cleaning import SOURCE_KIND_REASONS

GENERATOR = TEST_DATA / "make_hostile_catalog.py"
GOOD_PADDING = 250  # keeps the quarantine ratio under the blocking 20 % check


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_hostile_catalog", GENERATOR)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hostile = _load_generator()
ROWS = [*hostile.hostile_rows(), hostile.huge_row()]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "catalog.jsonl"
    path.write_bytes(hostile.catalog_bytes(ROWS))
    return path


def test_committed_corpus_is_what_the_script_writes() -> None:
    assert hostile.PATH.read_bytes() == hostile.catalog_bytes(hostile.hostile_rows())
    assert hostile.PATH.stat().st_size < 64_000  # the 10 MB row is made at test time, not committed


def test_every_row_is_kept_or_quarantined_with_the_expected_reason(catalog: Path) -> None:
    result = clean_rows(read_raw_rows(catalog), "tool_catalog")
    assert result.stats.rows_in == len(ROWS) == result.stats.rows_kept + result.stats.rows_quarantined
    reasons = {record.line_number: record.reason for record in result.quarantine}
    got = {label: reasons.get(line) for line, (label, _, _) in enumerate(ROWS, start=1)}
    assert got == {label: expected for label, _, expected in ROWS}
    assert all(record.detail for record in result.quarantine)
    line_reasons = {reason.value for reason in QuarantineReason if reason not in SOURCE_KIND_REASONS}
    assert {record.reason for record in result.quarantine} == line_reasons
    # Quarantine keeps a bounded excerpt, even of the 10 MB row.
    assert max(len(record.raw) for record in result.quarantine) <= 2_000
    kept = {doc.doc_id: doc for doc in result.documents}
    assert kept["ctrl-1"].title == "Ctrltool" and kept["ctrl-1"].text == "Text with controls here."
    assert kept["good-1"].text.startswith("Maps sequencing reads")  # the first row with an id wins
    assert kept["good-1"].metadata["year"] == 2019 and kept["meta-1"].metadata == {"meta_doc_id": "x"}


def _padded(catalog: Path) -> Path:
    good = [
        json.dumps(
            {"id": f"pad-{i}", "name": f"Padding tool {i}", "description": f"Counts k-mers in batch {i} of reads."}
        )
        for i in range(GOOD_PADDING)
    ]
    padded = catalog.with_name("padded.jsonl")
    padded.write_bytes(catalog.read_bytes() + "".join(line + "\n" for line in good).encode())
    return padded


def _ingest(path: Path, artifacts: Path, max_quarantine_ratio: float = 0.2):
    return materialize(
        [raw_catalog, cleaned_documents, chunks],
        resources={
            "catalog": CatalogResource(
                format="tool_catalog", path=str(path), max_quarantine_ratio=max_quarantine_ratio
            ),
            "chunking": ChunkingResource(),
            "storage": IndexStorageResource(home=str(artifacts / "home")),
            "parquet_io_manager": ParquetIOManager(base_dir=str(artifacts)),
        },
        raise_on_error=False,
    )


def test_ingestion_assets_quarantine_every_hostile_row(catalog: Path, tmp_path: Path) -> None:
    padded = _padded(catalog)
    result = _ingest(padded, tmp_path)
    assert result.success
    raw = stored_value(tmp_path, "raw_catalog")
    kept = stored_value(tmp_path, "cleaned_documents")
    quarantined = pd.read_parquet(tmp_path / "quarantined_documents.parquet")
    chunk_frame = stored_value(tmp_path, "chunks")
    assert len(raw) == len(ROWS) + GOOD_PADDING == len(kept) + len(quarantined)
    expected = {line: reason for line, (_, _, reason) in enumerate(ROWS, start=1) if reason}
    assert dict(zip(quarantined["line_number"], quarantined["reason"], strict=True)) == expected
    assert quarantined["detail"].str.len().min() > 0
    assert set(chunk_frame["doc_id"]) == set(kept["doc_id"])
    assert all(check.passed for check in result.get_asset_check_evaluations())


def test_a_mostly_hostile_catalog_stops_before_chunks(catalog: Path, tmp_path: Path) -> None:
    result = _ingest(catalog, tmp_path)
    assert not result.success
    checks = {check.check_name: check for check in result.get_asset_check_evaluations()}
    ratio = checks["quarantine_ratio_below_threshold"]
    assert not ratio.passed and checks["rows_accounted_per_source"].passed
    # The check says why, for the CLI to print: how many, and the reasons.
    assert ratio.description.startswith(f"{sum(1 for *_, r in ROWS if r)} of {len(ROWS)} rows quarantined")
    assert "malformed_json" in ratio.description
    # A user who accepts that share goes on with the rows that are left.
    assert _ingest(catalog, tmp_path / "accepting", max_quarantine_ratio=1.0).success
    # What `retrieval-assets run` prints when the build stops.
    [line] = console.failed_check_lines(result)
    assert line == f"check cleaned_documents/quarantine_ratio_below_threshold failed: {ratio.description}"
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == {"raw_catalog", "cleaned_documents", "quarantined_documents", "inbox_receipts"}
    # The quarantine table is written before the check blocks, so the rows can be inspected.
    assert len(pd.read_parquet(tmp_path / "quarantined_documents.parquet")) == sum(1 for *_, r in ROWS if r)


# Rows that once passed cleaning and then crashed a later build step, with the outcome each must
# have now: quarantined with this reason, or (None) kept and carried through every build step.
DOWNSTREAM_CRASHES = {
    "lone_surrogate_in_text": (
        '{"id": "sur-1", "name": "S", "description": "a lone \\ud800 surrogate"}', "invalid_utf8"
    ),
    "lone_surrogate_in_metadata_key": (
        '{"id": "sur-2", "name": "S", "description": "d", "metadata": {"\\udc00": "x"}}', "invalid_utf8"
    ),
    "nan_metadata": ('{"id": "nan-1", "name": "N", "description": "d", "metadata": {"score": NaN}}', "malformed_json"),
    "infinity_metadata": (
        '{"id": "inf-1", "name": "I", "description": "d", "metadata": {"score": -Infinity}}', "malformed_json"
    ),
    "integer_beyond_int64": (
        '{"id": "big-1", "name": "B", "description": "d", "metadata": {"count": 9223372036854775808}}',
        "invalid_metadata",
    ),
    "metadata_key_with_space": (
        '{"id": "key-1", "name": "K", "description": "d", "metadata": {"first author": "x"}}', None
    ),
    "empty_metadata_key": (
        '{"id": "key-2", "name": "K", "description": "d", "metadata": {"": "x"}}', "invalid_metadata"
    ),
}


@pytest.mark.parametrize(("line", "reason"), DOWNSTREAM_CRASHES.values(), ids=DOWNSTREAM_CRASHES.keys())
def test_each_former_crash_is_quarantined_with_its_reason_or_survives_every_build_step(
    line: str, reason: str | None, tmp_path: Path
) -> None:
    path = tmp_path / "catalog.jsonl"
    path.write_text(line + "\n")
    source = CatalogSource(format="tool_catalog", path=str(path))
    cleaned = clean_catalog(read_raw_catalog(source), source)
    if reason is not None:
        assert [(q.line_number, q.reason) for q in cleaned.quarantine] == [(1, reason)] and not cleaned.documents
        assert cleaned.quarantine[0].detail
        return
    assert not cleaned.quarantine and len(cleaned.documents) == 1
    build, version = build_catalog(tmp_path / "home", path)
    assert version.sealed and build.documents == build.chunks == 1 and build.quarantined == 0


def test_a_row_holding_a_lone_surrogate_itself_is_quarantined() -> None:
    # What a posted document's record becomes when the API hands it over: the surrogate is a
    # character of the row, not an escape, and no Arrow string (no Parquet frame) can hold it.
    record = {"id": "sur-3", "name": "S", "description": "a lone \ud800 surrogate"}
    row = RawRow(source="inbox", line_number=1, raw=json.dumps(record, ensure_ascii=False))
    cleaned = clean_rows([row], "tool_catalog")
    assert [(q.doc_id, q.reason) for q in cleaned.quarantine] == [(None, "invalid_utf8")] and not cleaned.documents
    assert cleaned.quarantine[0].raw == row.raw
