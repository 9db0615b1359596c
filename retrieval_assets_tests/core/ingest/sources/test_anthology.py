"""The ``acl_anthology`` source on three real collection files from the shared Anthology snapshot:
2024.kemt (frontmatter, papers without abstracts, two venues), 2020.sigtyp (markup and a blank
line inside an abstract, DOIs) and 2025.pslt (TeX math)."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from retrieval_assets.core.ingest.catalog import CatalogError, CatalogSource
from retrieval_assets.core.ingest.sources.anthology import detect_anthology, plain_text, read_anthology

ARCHIVE = Path("/work/shared/datasets/acl_anthology/anthology-data.tar.gz")
COLLECTIONS = ("2020.sigtyp", "2024.kemt", "2025.pslt")


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``data/`` with the three collections, the schema and ``yaml/``."""
    if not ARCHIVE.is_file():
        pytest.skip(f"the Anthology snapshot {ARCHIVE} is not on this machine")
    wanted = {f"data/xml/{c}.xml" for c in COLLECTIONS} | {"data/xml/schema.rnc"}
    root = tmp_path_factory.mktemp("anthology")
    with tarfile.open(ARCHIVE) as archive:
        members = [m for m in archive if m.name in wanted or m.name.startswith("data/yaml")]
        archive.extractall(root, members=members, filter="data")
    assert len([m for m in members if m.name in wanted]) == len(wanted)
    return root


def read(path: Path) -> tuple[dict[str | None, dict[str, Any]], dict[str, float]]:
    result = read_anthology(CatalogSource(format="acl_anthology", path=str(path)))
    rows = list(result.rows)
    assert [row.line_number for row in rows] == list(range(1, len(rows) + 1))
    return {record["id"]: record for record in (json.loads(row.raw) for row in rows)}, result.stats


def test_papers_become_documents_with_their_metadata(snapshot: Path) -> None:
    records, stats = read(snapshot)
    assert list(records) == [
        *(f"2020.sigtyp-1.{i}" for i in range(1, 7)),
        *(f"2024.kemt-1.{i}" for i in range(1, 6)),
        "2025.pslt-1.1",
        "2025.pslt-1.2",
    ]
    paper = records["2024.kemt-1.1"]
    assert paper["title"] == "Incorporating Hypernym Features for Improving Low-resource Neural Machine Translation"
    assert paper["text"].startswith("Parallel data is difficult to obtain for low-resource languages")
    assert paper["metadata"] == {
        "authors": ["Abhisek Chakrabarty", "Haiyue Song", "Raj Dabre", "Hideki Tanaka", "Masao Utiyama"],
        "year": 2024,
        "venue": ["kemt", "ws"],
        "booktitle": "Proceedings of the First International Workshop on Knowledge-Enhanced Machine Translation",
        "url": "https://aclanthology.org/2024.kemt-1.1/",
    }
    assert records["2020.sigtyp-1.6"]["metadata"]["doi"] == "10.18653/v1/2020.sigtyp-1.6"
    assert stats == {
        "papers": 13,
        "documents": 11,
        "quarantined": 2,
        "frontmatter": 3,  # one per volume, skipped
        "volumes": 3,
        "read_seconds": stats["read_seconds"],
    }


def test_papers_without_an_abstract_are_quarantined(snapshot: Path) -> None:
    records, _ = read(snapshot)
    for doc_id in ("2024.kemt-1.4", "2024.kemt-1.5"):
        assert records[doc_id] == {
            "id": doc_id,
            "rejected": {"reason": "missing_abstract", "detail": "the paper has no abstract"},
        }


def test_text_drops_markup_and_keeps_line_breaks_as_spaces(snapshot: Path) -> None:
    records, _ = read(snapshot)
    paper = records["2020.sigtyp-1.6"]
    assert paper["title"] == "NUIG: Multitasking Self-attention based approach to SigTyp 2020 Shared Task"
    assert paper["text"].startswith("The paper describes the Multitasking Self-attention based approach to")
    # The XML has a blank line here; the library's as_text() would give "simultaneously.Results".
    assert "simultaneously. Results show" in paper["text"]
    # TeX math stays TeX source, as in the Anthology's JSON Lines export, for cleaning to render.
    assert "an interesting contrast\\colon while" in records["2025.pslt-1.1"]["text"]


def test_detection_and_the_data_folder_itself(snapshot: Path, tmp_path: Path) -> None:
    assert detect_anthology(snapshot) and detect_anthology(snapshot / "data")
    assert not detect_anthology(tmp_path)
    records, _ = read(snapshot / "data")
    assert len(records) == 13


def test_a_collection_the_library_cannot_parse_is_one_corrupt_file_row(snapshot: Path, tmp_path: Path) -> None:
    shutil.copytree(snapshot / "data", tmp_path / "data")
    (tmp_path / "data" / "xml" / "2024.kemt.xml").write_text('<collection id="2024.kemt"><volume id="1"><meta>')
    records, stats = read(tmp_path)
    assert records[None]["rejected"]["reason"] == "corrupt_file"
    assert records[None]["rejected"]["detail"].startswith("xml/2024.kemt.xml: XMLSyntaxError")
    assert len(records) == 9 and stats["documents"] == 8 and stats["papers"] == 8


def test_missing_data_is_a_catalog_error(snapshot: Path, tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="neither xml/ nor data/xml/"):
        read_anthology(CatalogSource(format="acl_anthology", path=str(tmp_path / "absent")))
    (tmp_path / "data" / "xml").mkdir(parents=True)
    with pytest.raises(CatalogError, match="no xml/schema.rnc"):
        read_anthology(CatalogSource(format="acl_anthology", path=str(tmp_path)))


def test_without_the_library_the_error_says_how_to_install_it(snapshot: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "acl_anthology", None)  # import raises ImportError
    with pytest.raises(CatalogError, match=r"pip install --no-deps acl-anthology==0\.5\.4"):
        read_anthology(CatalogSource(format="acl_anthology", path=str(snapshot)))


def test_plain_text_keeps_tex_source_and_spaces_line_breaks() -> None:
    from acl_anthology.text import MarkupText
    from lxml import etree

    xml = "<abstract>Runs in <tex-math>O(n^3)</tex-math> time.\n\nWe <i>also</i>  show\nmore.</abstract>"
    markup = MarkupText.from_xml(etree.fromstring(xml))
    assert plain_text(markup) == "Runs in O(n^3) time. We also show more."
    assert markup.as_text() == "Runs in O(n3) time.We also showmore."  # what the library gives
