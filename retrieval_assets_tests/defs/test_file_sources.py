"""Folders of files, tables and the ACL Anthology's data, each end to end through the build job
and the query resource: built, searched, hits carrying their section and page, and a folder
re-synced (a file changed, one deleted) giving an index equal to the folder."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_assets.defs.io_manager import stored_value
from retrieval_assets.defs.resources import (
    CatalogResource,
    ChunkingResource,
    IndexStorageResource,
    ModelResource,
    SearchResource,
)
from retrieval_assets.runs import build_index, deployment_resources, materialized
from retrieval_assets_tests.core.ingest.sources.test_anthology import snapshot  # noqa: F401 (a fixture)
from retrieval_assets_tests.core.ingest.sources.test_formats import (
    NOTES_MD,
    PAPER_HTML,
    write_encrypted_pdf,
    write_paper_pdf,
    write_report_docx,
    write_scan_pdf,
)


def _search(home: Path, query: str, top_k: int = 5):
    search = SearchResource(storage=IndexStorageResource(home=str(home)), models=ModelResource())
    try:
        return search.search(query, top_k=top_k).hits
    finally:
        search.close()


def _build(home: Path, catalog: CatalogResource, **overrides: Any):
    outcome = build_index(deployment_resources(home, catalog, **overrides))
    assert outcome.success and outcome.candidate is not None and outcome.candidate.sealed, outcome.run.run_id
    # Served as promotion would: the build's version becomes what the query resource opens.
    versions = IndexStorageResource(home=str(home)).versions()
    versions.promote(versions.version(outcome.candidate.version), reason="served for this test")
    return outcome


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "papers").mkdir(parents=True)
    paper = write_paper_pdf(root / "papers" / "retrieval.pdf")
    write_scan_pdf(root / "papers" / "scan.pdf")
    write_encrypted_pdf(root / "papers" / "locked.pdf", paper)
    (root / "web").mkdir()
    (root / "web" / "guide.html").write_bytes(PAPER_HTML)
    (root / "notes.md").write_text(NOTES_MD)
    write_report_docx(root / "report.docx")
    (root / "todo.txt").write_text("Shopping list\nmilk and bread for the weekend\n")
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    # Enough good files that three bad ones stay under the quarantine ratio check's limit.
    topics = ["glaciers", "volcanoes", "monsoons", "tsunamis", "auroras", "geysers", "deltas", "dunes"]
    (root / "notes").mkdir()
    for topic in topics:
        (root / "notes" / f"{topic}.md").write_text(f"# {topic.title()}\n\nField notes about {topic}.\n")
    return root


def test_a_folder_of_files_is_built_searched_and_re_synced(folder: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    catalog = CatalogResource(format="files", path=str(folder))
    # Windows small enough that the four-page test paper is cut into several chunks.
    chunking = ChunkingResource(window_words=24, overlap_words=4)
    outcome = _build(home, catalog, chunking=chunking)
    cleaned = materialized(outcome.run, "cleaned_documents")
    # 16 files in: 13 documents kept, and three quarantined with their reasons.
    assert (cleaned["rows_in"], outcome.documents, outcome.quarantined) == (16, 13, 3)
    assert cleaned["quarantined/no_text_layer"] == 1
    assert cleaned["quarantined/encrypted_file"] == 1
    assert cleaned["quarantined/unsupported_format"] == 1
    by_source = {row.data["source"]: row.data for row in cleaned["by_source"].records}
    assert by_source["docs"]["kept"] == 13 and by_source["docs"]["rows_in"] == 16
    reading = {row.data["source"]: row.data for row in materialized(outcome.run, "raw_catalog")["reading"].records}
    assert reading["docs"]["kind"] == "files" and reading["docs"]["files"] == 16

    # A hit says where in the file it is: the PDF's section and its pages.
    hits = _search(home, "click logs training data")
    top = hits[0]
    assert top.doc_id == "papers/retrieval.pdf"
    assert top.section == "2.1 Training Data" and (top.metadata["page_start"], top.metadata["page_end"]) == (2, 3)
    assert top.metadata["format"] == "pdf" and top.metadata["pages"] == 4
    html = _search(home, "contrastive losses hard negatives")[0]
    assert (html.doc_id, html.section) == ("web/guide.html", "Training")
    markdown = _search(home, "shards split the corpus")[0]
    assert (markdown.doc_id, markdown.section) == ("notes.md", "Sharding")
    # The short report's sections fit one window: the chunk is named after the one with most words.
    word = _search(home, "recall went up findings")[0]
    assert (word.doc_id, word.title, word.section) == ("report.docx", *["Quarterly Retrieval Report"] * 2)
    assert "Copyright" not in " ".join(hit.text for hit in _search(home, "privacy policy cookies", top_k=10))

    # The folder syncs: a note changes, the text file goes; unchanged files are not parsed again.
    (folder / "notes.md").write_text("# Overview\n\nQuantum annealing schedules for sparse graphs.\n")
    (folder / "todo.txt").unlink()
    second = _build(home, catalog, chunking=chunking)
    reading = {row.data["source"]: row.data for row in materialized(second.run, "raw_catalog")["reading"].records}
    # 15 files left: 13 reused, the changed note parsed, the unsupported file judged from its name alone.
    assert (reading["docs"]["files_reused"], reading["docs"]["files_parsed"]) == (13, 1)
    assert second.documents == 12
    assert _search(home, "quantum annealing schedules")[0].doc_id == "notes.md"
    assert "todo.txt" not in {hit.doc_id for hit in _search(home, "milk and bread for the weekend", top_k=20)}


def test_a_parquet_table_is_built_with_its_column_mapping(tmp_path: Path) -> None:
    topics = ["glaciers", "volcanoes", "monsoons", "tsunamis", "auroras", "geysers"]
    table = pa.table(
        {
            "key": ["r1", "r2", None, *[f"t{i}" for i in range(len(topics))]],
            "headline": ["Insulin resistance", "Tidal energy", "No id", *[topic.title() for topic in topics]],
            "body": [
                "Insulin resistance in skeletal muscle precedes type 2 diabetes.",
                "Tidal turbines convert the energy of ocean currents.",
                "This row has no id.",
                *[f"Field notes about {topic} and their study." for topic in topics],
            ],
            "year": [2020, 2021, 2022, *range(2000, 2000 + len(topics))],
        }
    )
    path = tmp_path / "rows.parquet"
    pq.write_table(table, path)
    catalog = CatalogResource(
        format="table", path=str(path), id_column="key", title_column="headline", text_column="body"
    )
    outcome = _build(tmp_path / "home", catalog)
    assert (outcome.documents, outcome.quarantined) == (8, 1)
    [hit] = _search(tmp_path / "home", "ocean currents turbines", top_k=1)
    assert (hit.doc_id, hit.title, hit.metadata["year"]) == ("r2", "Tidal energy", 2021)


def test_the_anthology_data_directory_is_built_and_searched(snapshot: Path, tmp_path: Path) -> None:  # noqa: F811
    outcome = _build(tmp_path / "home", CatalogResource(format="auto", path=str(snapshot)))
    cleaned = materialized(outcome.run, "cleaned_documents")
    assert outcome.documents > 0 and cleaned["quarantined/missing_abstract"] == outcome.quarantined
    documents = stored_value(tmp_path / "home" / "artifacts", "cleaned_documents")
    first = documents.iloc[0]
    hits = _search(tmp_path / "home", first["title"], top_k=10)
    [hit] = [hit for hit in hits if hit.doc_id == first["doc_id"]]
    assert hit.metadata["venue"] and hit.metadata["year"] == 2020 and hit.metadata["authors"]


def test_a_single_pdf_is_a_source_of_its_own(folder: Path, tmp_path: Path) -> None:
    shutil.copy(folder / "papers" / "retrieval.pdf", tmp_path / "one.pdf")
    catalog = CatalogResource(format="auto", path=str(tmp_path / "one.pdf"))
    [source] = catalog.sources().values()
    assert (source.format, source.include) == ("files", ("one.pdf",))
