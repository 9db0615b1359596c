"""Ingest steps: the document inbox applied after the catalogs, and the re-run memo of cleaning
and chunking, on the bundled SciFact sample."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from retrieval_assets.core.index.build import chunk_table
from retrieval_assets.core.ingest import cleaning, steps
from retrieval_assets.core.ingest import memo as memo_module
from retrieval_assets.core.ingest.catalog import CatalogSource, RawRow
from retrieval_assets.core.ingest.inbox import (
    DocumentInbox,
    InboxEntry,
    InboxOperation,
    InboxOutcome,
)
from retrieval_assets.core.ingest.memo import BLANK_TEXT, ParsedRows
from retrieval_assets.core.ingest.steps import (
    chunk_frame,
    chunk_into_table,
    chunk_table_facts,
    clean_catalogs,
    read_raw_catalogs,
    rows_of_source,
)
from retrieval_assets.core.io import tables
from retrieval_assets.core.io.parted import PartedTable, TableWrite, open_table
from retrieval_assets.core.io.tables import ROW_HASH, frame_to_documents
from retrieval_assets.core.models import Chunk
from retrieval_assets.core.settings import ChunkingSettings
from retrieval_assets.paths import BUNDLED_DATA
from retrieval_assets_tests.core.ingest.stored import stored_chunks, stored_documents

CATALOG = CatalogSource(format="beir", path=str(BUNDLED_DATA / "scifact_mini"))


def _upsert(doc_id: str, text: str, tenant: str = "default", **record: object) -> InboxEntry:
    return InboxEntry.new(
        InboxOperation.UPSERT,
        doc_id,
        tenant,
        format="beir",
        record={"_id": doc_id, "title": "", "text": text, **record},
    )


def _delete(doc_id: str, tenant: str = "default") -> InboxEntry:
    return InboxEntry.new(InboxOperation.DELETE, doc_id, tenant)


def _clean_with_inbox(tmp_path: Path, entries: list[InboxEntry], memo: ParsedRows | None = None):
    inbox = DocumentInbox(tmp_path / "inbox")
    inbox.append(entries)
    sources = [CATALOG, CatalogSource(format="inbox", path=str(inbox.directory))]
    raw = read_raw_catalogs({str(i): s for i, s in enumerate(sources)})[0]
    return raw, clean_catalogs(raw, sources, memo)


def test_inbox_upserts_and_deletes_apply_after_the_catalog_and_every_row_is_accounted_for(tmp_path: Path) -> None:
    catalog_only = clean_catalogs(read_raw_catalogs({"main": CATALOG})[0], [CATALOG])
    first, second = catalog_only.documents["doc_id"].iloc[:2]
    entries = [
        _upsert("posted-1", "A new abstract about zebrafish fin regeneration."),
        _upsert(first, "The first document, rewritten."),
        _delete(second),
        _delete("never-existed"),
        _upsert("posted-1", "The new abstract, corrected."),
        _upsert(first, "Another tenant holds the same id in its own namespace.", tenant="acme"),
        _upsert("posted-2", ""),  # empty text: rejected with the cleaning reason
    ]
    raw, cleaned = _clean_with_inbox(tmp_path, entries)

    by_key = {(d.tenant_id, d.doc_id): d for d in frame_to_documents(cleaned.documents)}
    assert by_key[("default", "posted-1")].text == "The new abstract, corrected."
    assert by_key[("default", first)].text == "The first document, rewritten."
    assert ("default", second) not in by_key
    assert by_key[("acme", first)].text == "Another tenant holds the same id in its own namespace."
    assert len(cleaned.documents) == len(catalog_only.documents) + 1  # two added, one deleted
    # A replaced document keeps its place, a deleted one leaves it, an added one comes last.
    expected_order = [first, *catalog_only.documents["doc_id"].iloc[2:], "posted-1", first]
    assert cleaned.documents["doc_id"].tolist() == expected_order
    assert len(raw) == len(cleaned.documents) + len(cleaned.quarantine) + cleaned.superseded + cleaned.tombstones
    assert cleaned.superseded == 3 and cleaned.tombstones == 2

    outcomes = {(r["doc_id"], r["tenant_id"], r["operation"]): (r["outcome"], r["reason"]) for r in cleaned.receipts}
    assert [r["receipt"] for r in cleaned.receipts] == [e.receipt for e in entries]
    assert outcomes[(second, "default", "delete")] == (InboxOutcome.DELETED, None)
    assert outcomes[(first, "acme", "upsert")] == (InboxOutcome.INDEXED, None)
    assert outcomes[("posted-2", "default", "upsert")] == (InboxOutcome.REJECTED, "empty_text")
    rejected = {q.doc_id: q for q in cleaned.quarantine if q.source == str(tmp_path / "inbox")}
    assert set(rejected) == {"posted-2"} and rejected["posted-2"].reason == "empty_text"


def test_ids_live_in_a_tenants_namespace_across_catalogs_and_the_inbox(tmp_path: Path) -> None:
    """Two tenants' catalogs (and one catalog naming two tenants) may hold the same id, and both
    documents are kept with distinct chunk ids; within one tenant a repeated id is duplicate_id,
    whether the repeat is in the same catalog, another catalog or the inbox replaces it."""
    shared = {"id": "shared", "name": "Shared", "description": "An aligner for long reads."}
    main = tmp_path / "main.jsonl"
    main.write_text(
        "".join(
            json.dumps(record) + "\n"
            for record in [
                {**shared, "tenant_id": "alpha"},
                {**shared, "tenant_id": "beta", "description": "A variant caller for short reads."},
                {**shared, "tenant_id": "alpha", "description": "alpha's second 'shared': a duplicate."},
            ]
        )
    )
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({**shared, "description": "gamma's own shared tool."}) + "\n")
    again = tmp_path / "again.jsonl"
    again.write_text(json.dumps({**shared, "description": "alpha's shared once more."}) + "\n")
    inbox = DocumentInbox(tmp_path / "inbox")
    inbox.append([_upsert("shared", "beta's shared, replaced through the inbox.", tenant="beta")])
    sources = [
        CatalogSource(format="tool_catalog", path=str(main)),
        CatalogSource(format="tool_catalog", path=str(other), tenant_id="gamma"),
        CatalogSource(format="tool_catalog", path=str(again), tenant_id="alpha"),
        CatalogSource(format="inbox", path=str(inbox.directory)),
    ]
    raw = read_raw_catalogs({str(i): source for i, source in enumerate(sources)})[0]
    cleaned = clean_catalogs(raw, sources)

    texts = {(d.tenant_id, d.doc_id): d.text for d in frame_to_documents(cleaned.documents)}
    assert texts == {
        ("alpha", "shared"): "An aligner for long reads.",
        ("beta", "shared"): "beta's shared, replaced through the inbox.",
        ("gamma", "shared"): "gamma's own shared tool.",
    }
    assert [r["outcome"] for r in cleaned.receipts] == [InboxOutcome.INDEXED]
    duplicates = [(q.source, q.line_number, q.reason) for q in cleaned.quarantine]
    assert duplicates == [(str(main), 3, "duplicate_id"), (str(again), None, "duplicate_id")]
    assert "tenant 'alpha' already holds this id" in cleaned.quarantine[1].detail
    assert cleaned.stats.rows_quarantined == 2 and cleaned.stats.by_reason["duplicate_id"] == 2
    assert cleaned.by_source[str(again)].rows_kept == 0 and cleaned.by_source[str(again)].rows_quarantined == 1
    assert len(raw) == len(cleaned.documents) + len(cleaned.quarantine) + cleaned.superseded + cleaned.tombstones

    chunks = chunk_frame(cleaned.documents, ChunkingSettings())
    assert sorted(chunks["chunk_id"]) == ["alpha/shared#0", "beta/shared#0", "gamma/shared#0"]


def test_archived_entries_are_replayed_before_pending_ones(tmp_path: Path) -> None:
    inbox = DocumentInbox(tmp_path / "inbox")
    older = _upsert("posted-1", "Taken in by an earlier version.")
    inbox.append([older])
    inbox.take_in("v-earlier", {older.receipt: (InboxOutcome.INDEXED, None, None)})
    _, cleaned = _clean_with_inbox(tmp_path, [_upsert("posted-2", "Still pending.")])
    posted = {d.doc_id: d.text for d in frame_to_documents(cleaned.documents) if d.doc_id.startswith("posted-")}
    assert posted == {"posted-1": "Taken in by an earlier version.", "posted-2": "Still pending."}
    assert [r["doc_id"] for r in cleaned.receipts] == ["posted-1", "posted-2"]


def test_memo_reparses_and_rechunks_only_what_changed_with_identical_output(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    shutil.copytree(BUNDLED_DATA / "scifact_mini", catalog)
    source = CatalogSource(format="beir", path=str(catalog))
    settings = ChunkingSettings()

    def build(memo_dir: Path | None) -> tuple[pd.DataFrame, pd.DataFrame, ParsedRows | None, tuple[int, int]]:
        raw = read_raw_catalogs({"main": source})[0]
        memo = ParsedRows(memo_dir) if memo_dir else None
        cleaned = clean_catalogs(raw, [source], memo)
        if memo_dir is None:
            return cleaned.documents, chunk_frame(cleaned.documents, settings), memo, (len(cleaned.documents), 0)
        documents = stored_documents(cleaned, memo_dir)
        chunks, made = stored_chunks(documents, settings, memo_dir)
        return documents, chunks, memo, (made.documents_chunked, made.documents_reused)

    memo_dir = tmp_path / "memo"
    _, _, first_memo, first_stats = build(memo_dir)
    assert first_memo.reused == 0 and first_stats[1] == 0

    corpus = catalog / "corpus.jsonl"
    lines = corpus.read_text().splitlines()
    changed = json.loads(lines[3]) | {"text": "A changed abstract about circadian rhythm in shift workers."}
    lines[3] = json.dumps(changed)
    lines.insert(10, json.dumps({"_id": "inserted", "title": "Inserted", "text": "An inserted abstract."}))
    corpus.write_text("\n".join(lines[:-1]) + "\n")  # the last document removed

    documents, chunks, memo, stats = build(memo_dir)
    assert memo.parsed == 2 and memo.reused == len(lines) - 3
    assert stats == (2, len(documents) - 2)
    plain_documents, plain_chunks, _, _ = build(None)
    pd.testing.assert_frame_equal(documents, plain_documents)
    pd.testing.assert_frame_equal(chunks, plain_chunks)


def test_memo_misses_when_the_chunker_settings_change(tmp_path: Path) -> None:
    cleaned = clean_catalogs(read_raw_catalogs({"main": CATALOG})[0], [CATALOG])
    documents = cleaned.documents[:20]
    stored_chunks(documents, ChunkingSettings(), tmp_path)
    narrow = ChunkingSettings(window_words=40, overlap_words=10)
    chunks, made = stored_chunks(documents, narrow, tmp_path)
    assert made.documents_reused == 0
    pd.testing.assert_frame_equal(chunks, chunk_frame(documents, narrow))


@pytest.mark.parametrize("bad_line", ['{"_id": "x", "text": ', "", '{"_id": "dup", "text": "again"}'])
def test_memo_keeps_quarantine_reasons_and_duplicate_rule(tmp_path: Path, bad_line: str) -> None:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    lines = [json.dumps({"_id": "dup", "text": "first"}), bad_line, json.dumps({"_id": "ok", "text": "fine"})]
    (catalog / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    source = CatalogSource(format="beir", path=str(catalog))
    raw = read_raw_catalogs({"main": source})[0]
    plain = clean_catalogs(raw, [source])
    clean_catalogs(raw, [source], ParsedRows(tmp_path / "memo"))
    memo = ParsedRows(tmp_path / "memo")
    again = clean_catalogs(raw, [source], memo)
    assert memo.reused == 3 and memo.parsed == 0
    pd.testing.assert_frame_equal(stored_documents(again, tmp_path), plain.documents)
    assert again.quarantine == plain.quarantine


@pytest.mark.parametrize("memo", [False, True], ids=["no memo", "memo"])
def test_cleaning_and_chunking_a_few_rows_at_a_time_change_nothing(tmp_path: Path, monkeypatch, memo: bool) -> None:
    def build(home: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
        raw = read_raw_catalogs({"main": CATALOG})[0]
        settings = ChunkingSettings()
        if not memo:
            cleaned = clean_catalogs(raw, [CATALOG]).documents
            return cleaned, chunk_frame(cleaned, settings)
        cleaned = stored_documents(clean_catalogs(raw, [CATALOG], ParsedRows(home)), home)
        return cleaned, stored_chunks(cleaned, settings, home)[0]

    whole = build(tmp_path / "whole")
    for module in (tables, cleaning, steps):
        monkeypatch.setattr(module, "RECORD_BLOCK_ROWS", 3)
    in_blocks = build(tmp_path / "blocks")
    assert len(whole[0]) > 3 and len(whole[1]) > 3
    pd.testing.assert_frame_equal(in_blocks[0], whole[0])
    pd.testing.assert_frame_equal(in_blocks[1], whole[1])


def _raw_frame(sources: str) -> pd.DataFrame:
    rows = [RawRow(source=s, line_number=n, raw=f'{{"_id": "{n}", "text": "t"}}') for n, s in enumerate(sources, 1)]
    return tables.raw_rows_to_frame(rows)


def test_a_sources_rows_are_a_slice_of_the_raw_rows_where_consecutive() -> None:
    raw = _raw_frame("aabbbc")
    rows = rows_of_source(raw, "b")
    assert rows["line_number"].tolist() == [3, 4, 5]
    # A slice shares the raw rows' memory: a million rows' text is not copied per source.
    assert np.shares_memory(rows["line_number"].to_numpy(), raw["line_number"].to_numpy())
    assert rows_of_source(raw, "missing").empty


def test_a_sources_rows_scattered_among_others_are_all_taken_in_order() -> None:
    raw = _raw_frame("abab")
    assert rows_of_source(raw, "a")["line_number"].tolist() == [1, 3]
    assert rows_of_source(raw, "b")["line_number"].tolist() == [2, 4]


@pytest.mark.parametrize("changed", [[], [1], [0, 1, 2, 3, 4]], ids=["none", "one", "all"])
def test_memo_gives_rows_in_order_with_repeated_lines_whatever_it_knows(tmp_path: Path, changed: list[int]) -> None:
    lines = [json.dumps({"_id": f"d{n % 3}", "text": f"text {n % 3}"}) for n in range(5)]  # lines 4, 5 repeat 1, 2
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    corpus = catalog / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    source = CatalogSource(format="beir", path=str(catalog))
    clean_catalogs(read_raw_catalogs({"main": source})[0], [source], ParsedRows(tmp_path / "memo"))
    for n in changed:
        lines[n] = json.dumps({"_id": f"d{n % 3}", "text": f"changed {n % 3}"})
    corpus.write_text("\n".join(lines) + "\n")
    raw = read_raw_catalogs({"main": source})[0]
    memo = ParsedRows(tmp_path / "memo")
    again = clean_catalogs(raw, [source], memo)
    plain = clean_catalogs(raw, [source])
    assert memo.parsed == len(changed) and memo.reused == 5 - len(changed)
    pd.testing.assert_frame_equal(stored_documents(again, tmp_path), plain.documents)
    assert again.quarantine == plain.quarantine
    # What this build saw is what the next one finds: every row known, nothing parsed.
    last = ParsedRows(tmp_path / "memo")
    clean_catalogs(raw, [source], last)
    assert last.parsed == 0 and last.reused == 5


def test_a_small_change_appends_to_the_memo_and_a_large_one_rewrites_it(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    shutil.copytree(BUNDLED_DATA / "scifact_mini", catalog)
    source, settings, home = CatalogSource(format="beir", path=str(catalog)), ChunkingSettings(), tmp_path / "memo"
    artifacts = tmp_path / "artifacts"
    corpus = catalog / "corpus.jsonl"
    records = [json.loads(line) for line in corpus.read_text().splitlines()]

    def build(revised: set[int], round_: int) -> tuple[pd.DataFrame, ParsedRows, pd.DataFrame]:
        lines = [
            json.dumps(record | {"title": f"{record['title']} ({round_})"} if n in revised else record)
            for n, record in enumerate(records)
        ]
        corpus.write_text("\n".join(lines) + "\n")
        memo = ParsedRows(home)
        documents = stored_documents(clean_catalogs(read_raw_catalogs({"main": source})[0], [source], memo), artifacts)
        return stored_chunks(documents, settings, artifacts)[0], memo, documents

    def parts(name: str) -> dict[str, int]:
        table = open_table((home if name == "parsed_rows" else artifacts) / name)
        assert table is not None
        return {path.name: path.stat().st_ino for path in table.paths}

    def inodes(name: str) -> set[int]:
        return set(parts(name).values())

    build(set(), 0)
    before = {name: parts(name) for name in ("parsed_rows", "cleaned_documents", "chunks")}
    assert all(len(files) == 1 for files in before.values())
    # The cleaned documents are the records' rows, not a copy of them.
    assert inodes("cleaned_documents") == inodes("parsed_rows")
    chunks, memo, documents = build({3, 40}, 1)
    assert memo.parsed == 2
    # Each table keeps its file and gains one of the two documents' rows.
    for name, files in before.items():
        now = parts(name)
        assert len(now) == 2 and {file: now[file] for file in files} == files
    (added,) = set(parts("parsed_rows")) - set(before["parsed_rows"])
    assert len(pd.read_parquet(home / added)) == 2
    assert inodes("cleaned_documents") == inodes("parsed_rows")
    (added,) = set(parts("chunks")) - set(before["chunks"])
    assert set(pd.read_parquet(artifacts / added)["doc_id"]) == set(documents["doc_id"].iloc[[3, 40]])
    pd.testing.assert_frame_equal(chunks, chunk_frame(documents, settings))
    # A sixth of the catalog revised: extended, the tables' runs would be short (MIN_MEAN_RUN);
    # each is written whole, in order, and the files no table uses are gone.
    chunks, memo, documents = build(set(range(0, len(records), 6)), 2)
    # Rows 3 and 40 are back as the first build had them, which the memo no longer holds.
    assert memo.reused == len(records) - len(range(0, len(records), 6)) - 2
    assert all(len(parts(name)) == 1 for name in before)
    assert len(open_table(home / "parsed_rows").read()) == len(records)
    assert len(list(home.glob("*.parquet"))) == 1 and len(list(artifacts.glob("*.parquet"))) == 2
    pd.testing.assert_frame_equal(chunks, chunk_frame(documents, settings))


def test_with_a_memo_the_inbox_applies_as_without(tmp_path: Path) -> None:
    entries = [
        _upsert("posted-1", "A new abstract about zebrafish fin regeneration."),
        _upsert("posted-2", "Another posted abstract."),
    ]
    _, plain = _clean_with_inbox(tmp_path / "plain", entries)
    _, remembered = _clean_with_inbox(tmp_path / "memo", entries, ParsedRows(tmp_path / "memo" / "cache"))
    assert remembered.receipts == plain.receipts
    pd.testing.assert_frame_equal(stored_documents(remembered, tmp_path / "memo"), plain.documents)
    # Again, with every catalog row known: the posted documents are records of this build too.
    memo = ParsedRows(tmp_path / "memo" / "cache")
    _, again = _clean_with_inbox(tmp_path / "again", entries, memo)
    assert memo.parsed == 0
    pd.testing.assert_frame_equal(stored_documents(again, tmp_path / "memo"), plain.documents)


def test_chunk_table_facts_count_over_kept_and_added_rows(tmp_path: Path) -> None:
    def chunk(chunk_id: str, text: str, section: str = "body") -> Chunk:
        doc_id = chunk_id.split("#")[0]
        return Chunk(chunk_id=f"default/{chunk_id}", doc_id=doc_id, ordinal=0, section=section, text=text)

    def frame(*chunks: Chunk) -> pd.DataFrame:
        made = tables.chunks_to_frame(chunks)
        return made.assign(**{BLANK_TEXT: made["text"].str.strip() == ""})

    stem = tmp_path / "chunks"
    TableWrite(frame(chunk("a#0", "one"), chunk("b#0", "  \n"), chunk("c#0", "three")), "t").write(stem)
    base = open_table(stem)
    assert base is not None
    # Keeps a (first) and b (blank), drops c, adds a second a#0 and an abstract.
    added = frame(chunk("a#0", "again"), chunk("d#0", "four", "abstract"))
    facts = chunk_table_facts(TableWrite(added, "t", base, np.array([0, -1, 1, -1])))
    assert (facts.duplicate_ids, facts.empty_texts) == (1, 1)
    assert facts.sections == {"body": 3, "abstract": 1}
    assert facts.head["chunk_id"].tolist() == ["default/a#0", "default/a#0", "default/b#0", "default/d#0"]
    assert facts.head["text"].tolist() == ["one", "again", "  \n", "four"]


def test_the_chunk_table_keeps_each_rows_hash_and_blankness_as_made_from_the_stored_rows(tmp_path: Path) -> None:
    documents = clean_catalogs(read_raw_catalogs({"main": CATALOG})[0], [CATALOG]).documents
    documents.loc[3, "text"] = "   "
    stored_chunks(documents, ChunkingSettings(), tmp_path)
    table = open_table(tmp_path / "chunks")
    assert table is not None and ROW_HASH not in table.read().column_names
    held = table.read_pandas([*tables.CHUNK_COLUMNS, ROW_HASH, BLANK_TEXT])
    visible = table.read_pandas()
    assert np.array_equal(held[ROW_HASH].to_numpy(), tables.chunk_row_hashes(visible))
    pd.testing.assert_frame_equal(chunk_table(held), chunk_table(visible))
    assert held[BLANK_TEXT].tolist() == (visible["text"].str.strip() == "").tolist()


def test_chunking_the_stored_documents_reads_only_the_documents_it_chunks(tmp_path: Path, monkeypatch) -> None:
    settings = ChunkingSettings()
    posted = [_upsert("posted-1", "A posted abstract.")]
    _, cleaned = _clean_with_inbox(tmp_path, posted, ParsedRows(tmp_path / "cache"))
    documents = stored_documents(cleaned, tmp_path / "artifacts")
    table = open_table(tmp_path / "artifacts" / "cleaned_documents")
    assert table is not None
    made = chunk_into_table(table, settings, None)
    shown = made.write.frame[list(tables.CHUNK_COLUMNS)]
    pd.testing.assert_frame_equal(shown, chunk_frame(documents, settings))
    made.write.write(tmp_path / "artifacts" / "chunks")
    taken: list[int] = []
    take = PartedTable.take

    def counted(self: PartedTable, positions, columns=None):
        taken.append(len(positions))
        return take(self, positions, columns)

    monkeypatch.setattr(PartedTable, "take", counted)
    again = chunk_into_table(table, settings, open_table(tmp_path / "artifacts" / "chunks"))
    # Keyed by their rows' keys, the catalog's documents are not read; the posted one (no row
    # key) is, to hash its fields; no document is read to be chunked.
    assert (again.documents_chunked, again.documents_reused) == (0, len(documents))
    assert taken == [1, 0]


def test_memos_kept_before_they_were_extended_tables_are_removed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    legacy = ["parsed_rows.parquet", "parsed_rows.segment-1.parquet", "chunks.parquet", "chunks.segment-1.parquet"]
    for name in legacy:
        pd.DataFrame({"key": ["k"]}).to_parquet(cache / name)
    memo = ParsedRows(cache)
    cleaned = clean_catalogs(read_raw_catalogs({"main": CATALOG})[0], [CATALOG], memo)
    # The old memo is no memo (parsed again), and gone once this build's records are saved.
    assert memo.reused == 0 and cleaned.table is not None
    memo_module.remove_legacy_chunk_memo(cache)
    assert not any((cache / name).exists() for name in legacy)
    assert open_table(cache / "parsed_rows") is not None
