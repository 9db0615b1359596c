"""Telling a path's source kind from what it is, and a folder of sources."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrieval_assets.core.ingest.catalog import CatalogError
from retrieval_assets.core.ingest.sources.kinds import detect_kind, discover_sources, source_for_path


@pytest.fixture()
def sources(tmp_path: Path) -> Path:
    root = tmp_path / "sources"
    (root / "beir_set").mkdir(parents=True)
    (root / "beir_set" / "corpus.jsonl").write_text('{"_id": "1", "text": "t"}\n')
    (root / "anthology" / "data" / "xml").mkdir(parents=True)
    (root / "anthology" / "data" / "yaml").mkdir()
    (root / "anthology" / "data" / "xml" / "2020.acl.xml").write_text("<collection/>")
    (root / "lake").mkdir()
    pq.write_table(pa.table({"id": ["a"], "text": ["x"]}), root / "lake" / "part-0.parquet")
    pq.write_table(pa.table({"id": ["a"], "text": ["x"]}), root / "rows.parquet")
    (root / "rows2.csv").write_text("id,text\na,x\n")
    (root / "tools.jsonl").write_text(json.dumps({"id": "t1", "name": "Tool", "description": "d"}) + "\n")
    (root / "docs.jsonl").write_text(json.dumps({"_id": "d1", "title": "T", "text": "x"}) + "\n")
    (root / "papers").mkdir()
    (root / "papers" / "a.md").write_text("# A\n")
    (root / "loose.pdf").write_bytes(b"%PDF-1.4")
    (root / ".hidden").mkdir()
    return root


def test_each_entry_is_told_by_what_it_is(sources: Path) -> None:
    found = {name: (source.format, source.tenant_id) for name, source in discover_sources(sources).items()}
    assert found == {
        "anthology": ("acl_anthology", "anthology"),
        "beir_set": ("beir", "beir_set"),
        "docs": ("table", "docs"),  # JSON Lines rows that are not tools
        "lake": ("table", "lake"),
        "papers": ("files", "papers"),
        "rows": ("table", "rows"),
        "rows2": ("table", "rows2"),
        "tools": ("tool_catalog", "tools"),
    }  # the loose PDF is no source of its own; hidden entries are skipped


def test_a_single_file_is_its_folder_with_only_it_included(sources: Path) -> None:
    source = source_for_path(sources / "loose.pdf", "default")
    assert (source.format, source.path, source.include) == ("files", str(sources), ("loose.pdf",))
    assert detect_kind(sources / "papers" / "a.md") == "files"


def test_a_missing_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=f"source not found: {tmp_path / 'nope'}"):
        detect_kind(tmp_path / "nope")
