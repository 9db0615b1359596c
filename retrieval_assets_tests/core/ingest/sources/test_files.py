"""``read_files`` on a hostile folder: one row per entry whatever it is (good documents, zero-byte
and binary files, an oversized one, link loops, a broken link, a fifo, an unreadable file, an
unsupported extension, a scan, an encrypted and a corrupt PDF), and the per-file memo across runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from retrieval_assets.core.ingest.catalog import CatalogError, CatalogSource
from retrieval_assets.core.ingest.sources import files
from retrieval_assets.core.ingest.sources.files import glob_regex, memo_path, read_files
from retrieval_assets.core.ingest.sources.records import SourceRead
from retrieval_assets_tests.core.ingest.sources.test_formats import (
    NOTES_MD,
    PAPER_HTML,
    write_encrypted_pdf,
    write_paper_pdf,
    write_report_docx,
    write_scan_pdf,
)

LIMIT = 100_000
AS_ROOT = os.geteuid() == 0  # root reads a chmod 000 file anyway

# relative path -> expected quarantine reason, or None for a document
EXPECTED: dict[str, str | None] = {
    ".hidden.md": None,
    "big.txt": "file_too_large",
    "binary.md": "invalid_utf8",
    "broken-link.txt": "unreadable_file",
    "data.xyz": "unsupported_format",
    "docs/guide.html": None,
    "docs/notes.md": None,
    "docs/report.docx": None,
    "docs/up": "unreadable_file",  # a link to the parent folder: not followed
    "empty.txt": "empty_text",
    "loop.txt": "unreadable_file",
    "nothing.html": "empty_text",
    "papers/broken.pdf": "corrupt_file",
    "papers/locked.pdf": "encrypted_file",
    "papers/paper.pdf": None,
    "papers/scan.pdf": "no_text_layer",
    "pipe.txt": "unreadable_file",
    "readme.txt": None,
    "secret.txt": None if AS_ROOT else "unreadable_file",
    "shared.md": None,  # a link to a file outside the folder: read
}


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    root = tmp_path / "folder"
    (root / "docs").mkdir(parents=True)
    (root / "papers").mkdir()
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "drafts").mkdir()
    (root / "drafts" / "wip.md").write_text("# Draft\n\nexcluded\n")

    (root / ".hidden.md").write_text("# Hidden\n\nStill a document.\n")
    (root / "big.txt").write_bytes(b"x" * (LIMIT + 1))
    (root / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00")
    os.symlink("missing.txt", root / "broken-link.txt")
    (root / "data.xyz").write_text("what is this")
    (root / "docs" / "guide.html").write_bytes(PAPER_HTML)
    (root / "docs" / "notes.md").write_text(NOTES_MD)
    write_report_docx(root / "docs" / "report.docx")
    os.symlink("..", root / "docs" / "up")
    (root / "empty.txt").touch()
    os.symlink("loop.txt", root / "loop.txt")
    (root / "nothing.html").write_text("<html><body><script>var x = 1;</script></body></html>")
    paper = write_paper_pdf(root / "papers" / "paper.pdf")
    (root / "papers" / "broken.pdf").write_bytes(paper.read_bytes()[:300])
    write_encrypted_pdf(root / "papers" / "locked.pdf", paper)
    write_scan_pdf(root / "papers" / "scan.pdf")
    os.mkfifo(root / "pipe.txt")
    (root / "readme.txt").write_text("Read Me\n\nHow to use this folder.\n")
    (root / "secret.txt").write_text("Secret\n\nclassified\n")
    (root / "secret.txt").chmod(0)
    outside = tmp_path / "outside.md"
    outside.write_text("# Shared\n\nLives outside the folder.\n")
    os.symlink(outside, root / "shared.md")
    return root


def _source(root: Path) -> CatalogSource:
    return CatalogSource(format="files", path=str(root), max_file_bytes=LIMIT, exclude=("drafts/**",))


def _records(read: SourceRead) -> list[dict[str, Any]]:
    return [json.loads(row.raw) for row in read.rows]


def _outcomes(records: list[dict[str, Any]]) -> dict[str, str | None]:
    return {record["id"]: record["rejected"]["reason"] if "rejected" in record else None for record in records}


def test_every_entry_is_one_row_with_its_reason(hostile: Path, tmp_path: Path) -> None:
    read = read_files(_source(hostile))
    rows = list(read.rows)
    records = [json.loads(row.raw) for row in rows]

    # A folder's files in name order, then its subfolders; drafts (excluded) and .git are skipped.
    assert [record["id"] for record in records] == sorted(EXPECTED, key=lambda name: ("/" in name, name))
    assert _outcomes(records) == EXPECTED
    assert [row.line_number for row in rows] == list(range(1, len(EXPECTED) + 1))
    assert {row.source for row in rows} == {str(hostile)}

    documents = [name for name, reason in EXPECTED.items() if reason is None]
    assert read.stats["files"] == len(EXPECTED)
    assert read.stats["documents"] == len(documents)
    assert read.stats["quarantined"] == len(EXPECTED) - len(documents)
    assert read.stats["format/pdf"] == 1 and read.stats["format/docx"] == 1 and read.stats["format/html"] == 1
    assert read.stats["files_reused"] == 0 and read.stats["bytes_read"] > 0

    by_id = {record["id"]: record for record in records}
    details = {name: record["rejected"]["detail"] for name, record in by_id.items() if "rejected" in record}
    assert details["docs/up"] == "symbolic link to a folder, not followed"
    assert details["loop.txt"] == "symbolic link loop"
    assert details["broken-link.txt"] == "broken symbolic link to missing.txt"
    assert details["pipe.txt"].startswith("a named pipe")
    assert details["big.txt"] == f"{LIMIT + 1} bytes, over the limit of {LIMIT}"

    paper = by_id["papers/paper.pdf"]
    assert paper["title"] == "Sparse and Dense Retrieval Revisited"
    assert paper["metadata"]["format"] == "pdf" and paper["metadata"]["pages"] == 4
    assert paper["metadata"]["path"] == "papers/paper.pdf" and paper["metadata"]["author"] == "A. Author"
    assert paper["metadata"]["bytes"] == (hostile / "papers" / "paper.pdf").stat().st_size
    assert paper["metadata"]["modified"].endswith("+00:00")
    assert {"heading": "3 Results", "page": 3, "text": "Recall improves by ten points."} in paper["blocks"]
    assert "tenant_id" not in paper
    assert by_id["readme.txt"]["title"] == "Read Me"
    assert by_id["shared.md"]["title"] == "Shared"


def test_memo_reuses_unchanged_files_and_follows_changes(hostile: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = read_files(_source(hostile), cache)
    first_records = _records(first)
    parsed = first.stats["files_parsed"]
    assert parsed > 0 and first.stats["files_reused"] == 0

    second = read_files(_source(hostile), cache)
    assert _records(second) == first_records
    assert second.stats["files_reused"] == parsed and second.stats["files_parsed"] == 0
    assert second.stats["bytes_read"] == 0  # same size and mtime: not even read

    notes = hostile / "docs" / "notes.md"
    stat = notes.stat()
    os.utime(notes, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    readme = hostile / "readme.txt"
    readme.write_text("Read Me Again\n\nChanged text.\n")
    (hostile / "docs" / "guide.html").unlink()

    third = read_files(_source(hostile), cache)
    third_outcomes = _outcomes(third_records := _records(third))
    assert "docs/guide.html" not in third_outcomes and len(third_records) == len(EXPECTED) - 1
    assert third.stats["files_parsed"] == 1  # only the changed readme
    assert third.stats["files_reused"] == parsed - 2
    assert third.stats["bytes_read"] == stat.st_size + readme.stat().st_size  # the touched file was hashed
    by_id = {record["id"]: record for record in third_records}
    assert by_id["readme.txt"]["title"] == "Read Me Again"
    first_notes = next(record for record in first_records if record["id"] == "docs/notes.md")
    assert by_id["docs/notes.md"]["metadata"]["modified"] != first_notes["metadata"]["modified"]  # the new mtime

    memo = json.loads(memo_path(cache, hostile).read_text())
    assert "docs/guide.html" not in memo["files"] and "readme.txt" in memo["files"]


def test_changed_extractor_code_parses_again(hostile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    first = read_files(_source(hostile), cache)
    list(first.rows)
    monkeypatch.setattr(files, "extractor_version", lambda: "another version")
    again = read_files(_source(hostile), cache)
    list(again.rows)
    assert again.stats["files_reused"] == 0 and again.stats["files_parsed"] == first.stats["files_parsed"]


def test_globs_over_relative_paths() -> None:
    def matches(pattern: str, path: str) -> bool:
        return glob_regex(pattern).fullmatch(path) is not None

    assert matches("**/*.md", "a.md") and matches("**/*.md", "x/y/a.md")
    assert matches("*.md", "a.md") and not matches("*.md", "x/a.md")
    assert matches("drafts/**", "drafts") and matches("drafts/**", "drafts/a/b.md") and not matches("drafts/**", "d")
    assert matches("docs/**/*.pdf", "docs/a.pdf") and matches("docs/**/*.pdf", "docs/x/y/a.pdf")
    assert matches("[!a]?.txt", "bc.txt") and not matches("[!a]?.txt", "ab.txt")
    assert matches("a+b(1).txt", "a+b(1).txt")


def test_include_and_exclude_select_entries(hostile: Path) -> None:
    source = CatalogSource(format="files", path=str(hostile), include=("papers/*.pdf", "**/*.md"), exclude=("*.md",))
    assert [record["id"] for record in _records(read_files(source))] == [
        "docs/notes.md",
        "docs/up",  # a link to a folder is reported whatever the includes say
        "drafts/wip.md",
        "papers/broken.pdf",
        "papers/locked.pdf",
        "papers/paper.pdf",
        "papers/scan.pdf",
    ]


def test_the_path_must_be_a_folder(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("x")
    for path in (tmp_path / "missing", tmp_path / "file.txt"):
        with pytest.raises(CatalogError, match=str(path)):
            read_files(CatalogSource(format="files", path=str(path)))


@pytest.mark.skipif(AS_ROOT, reason="root lists a chmod 000 folder anyway")
def test_a_folder_that_cannot_be_listed_is_one_row(tmp_path: Path) -> None:
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "a.txt").write_text("hidden from us\n")
    (tmp_path / "z.txt").write_text("Visible\n")
    (tmp_path / "locked").chmod(0)
    try:
        records = _records(read_files(CatalogSource(format="files", path=str(tmp_path))))
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert _outcomes(records) == {"z.txt": None, "locked": "unreadable_file"}
