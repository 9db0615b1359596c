"""The format extractors on real files written by their own writers: fpdf2 PDFs (a paper with a
running header, page-number footers and hyphenated line ends; a title in the largest font under a
journal banner; left and right running heads on alternate pages; a scan without text; a text layer
of symbol soup; a pypdf-encrypted one; a truncated one), HTML with boilerplate, Markdown with front
matter and code fences, python-docx documents and plain text."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import docx
import pytest
from docx.document import Document as DocxDocument
from fpdf import FPDF
from pypdf import PdfWriter

from retrieval_assets.core.ingest.reasons import QuarantineReason
from retrieval_assets.core.ingest.sources.formats import ExtractedFile, extract
from retrieval_assets.core.ingest.sources.records import ExtractionFailed

RUNNING_HEADER = "Journal of Retrieval Studies, Vol. 3"
PAPER_PAGES = [
    [
        "Sparse and Dense Retrieval Revisited",
        "Abstract",
        "We study retrie-",
        "val of documents over large collections with a bi-",
        "Encoder and a BM-",
        "25 baseline.",
        "1 Introduction",
        "Retrieval systems rank documents for a query and are",
        "evaluated on shared benchmarks.",
    ],
    [
        "2 Methods",
        "We sampled queries from the logs of a search engine and the",
        "100 Participants were recruited from a panel.",
        "2.1 Training Data",
        "The data comes from click logs.",
    ],
    [
        "Training continues on the second page of the section without a new title.",
        "3 Results",
        "Recall improves by ten points.",
    ],
    [
        "References",
        "[1] A. Author. Dense passage retrieval. 2020.",
    ],
]
PAPER_HTML = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>Dense retrieval guide | Example Site</title>
<meta name="author" content="Jane Doe"></head>
<body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/about">About us</a></li></ul></nav>
<div id="cookie-banner">We use cookies to improve your experience. Accept all cookies.</div>
<main><article>
<h1>Dense Retrieval</h1>
<p>Dense retrieval encodes queries and documents into vectors so that nearest neighbours are relevant
documents. This paragraph is long enough to count as the content of the page.</p>
<h2>Training</h2>
<p>Models are trained with contrastive losses over hard negatives mined from a first-stage retriever.</p>
<table><tr><th>Model</th><th>nDCG</th></tr><tr><td>BM25</td><td>0.43</td></tr></table>
<h2>Evaluation</h2>
<p>We evaluate on BEIR with <code>nDCG@10</code> and <a href="https://example.org/recall">recall</a>.</p>
</article></main>
<footer>Copyright 2024 Example Corp. All rights reserved. <a href="/privacy">Privacy policy</a></footer>
</body></html>
"""
NOTES_MD = """---
title: Retrieval Notes
author: Jane Doe
tags: [retrieval, notes]
---
# Overview

Some `inline code` and [a link](https://example.org/hidden-url) and ![a diagram](d.png).

## Indexing

### Sharding

Shards split the corpus.

```bash
# not a heading
make index
```

Setext Section
--------------

| shard | docs |
|-------|------|
| a     | 10   |
"""


def write_paper_pdf(path: Path, *, title: str | None = "Sparse and Dense Retrieval Revisited") -> Path:
    """A 4-page paper: a running header on every page, "Page N" footers, numbered sections."""

    class Paper(FPDF):
        def header(self) -> None:
            self.set_font("Helvetica", size=9)
            self.cell(0, 8, RUNNING_HEADER, new_x="LMARGIN", new_y="NEXT")

        def footer(self) -> None:
            self.set_y(-15)
            self.set_font("Helvetica", size=9)
            self.cell(0, 10, f"Page {self.page_no()}", align="C")

    pdf = Paper()
    if title is not None:
        pdf.set_title(title)
    pdf.set_author("A. Author")
    pdf.set_font("Helvetica", size=11)
    for lines in PAPER_PAGES:
        pdf.add_page()
        for line in lines:
            pdf.cell(0, 6, line, new_x="LMARGIN", new_y="NEXT")
    path.write_bytes(bytes(pdf.output()))
    return path


BODY_LINES = [
    "Retrieval systems rank documents for a query and are evaluated on",
    "shared benchmarks with graded relevance judgements from assessors.",
    "Dense retrievers encode queries and documents into the same space.",
]


def write_lines_pdf(
    path: Path,
    pages: list[list[tuple[int, str]]],
    *,
    title: str | None = None,
    running_head: Callable[[int], str | None] | None = None,
) -> Path:
    """One page per item of ``pages``, each line written in its own font size; ``running_head``
    gives a page number's header line (None: no header)."""

    class Lines(FPDF):
        def header(self) -> None:
            line = running_head(self.page_no()) if running_head else None
            if line:
                self.set_font("Helvetica", size=9)
                self.cell(0, 8, line, new_x="LMARGIN", new_y="NEXT")

    pdf = Lines()
    if title is not None:
        pdf.set_title(title)
    for lines in pages:
        pdf.add_page()
        for size, line in lines:
            pdf.set_font("Helvetica", size=size)
            pdf.cell(0, size * 0.5, line, new_x="LMARGIN", new_y="NEXT")
    path.write_bytes(bytes(pdf.output()))
    return path


def write_scan_pdf(path: Path) -> Path:
    """Two pages with only drawings: no text layer."""
    pdf = FPDF()
    for _ in range(2):
        pdf.add_page()
        pdf.rect(20, 20, 100, 60, style="F")
    path.write_bytes(bytes(pdf.output()))
    return path


def write_encrypted_pdf(path: Path, source: Path) -> Path:
    writer = PdfWriter(clone_from=source)
    writer.encrypt("pw")
    with path.open("wb") as handle:
        writer.write(handle)
    return path


def write_report_docx(path: Path) -> Path:
    document = docx.Document()
    document.core_properties.author = "Jane Doe"
    document.add_heading("Quarterly Retrieval Report", 0)
    document.add_paragraph("Opening remarks before any section.")
    document.add_heading("Findings", 1)
    document.add_paragraph("Recall went up.")
    document.add_heading("Details", 2)
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "metric"
    table.cell(0, 1).text = "value"
    merged = table.cell(1, 0).merge(table.cell(1, 1))
    merged.text = "recall 0.9"
    path.write_bytes(_docx_bytes(document))
    return path


def _docx_bytes(document: DocxDocument) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _reason(path: Path, data: bytes) -> QuarantineReason:
    with pytest.raises(ExtractionFailed) as failure:
        extract(path, data)
    return failure.value.reason


def _sections(result: ExtractedFile) -> list[tuple[str | None, int | None]]:
    return [(block.heading, block.page) for block in result.blocks]


def _all_text(result: ExtractedFile) -> str:
    return "\n".join(block.text for block in result.blocks)


# PDF


def test_pdf_blocks_per_section_and_page_without_running_lines(tmp_path: Path) -> None:
    result = extract(tmp_path / "paper.pdf", write_paper_pdf(tmp_path / "paper.pdf").read_bytes())

    assert result.format == "pdf" and result.pages == 4
    assert result.title == "Sparse and Dense Retrieval Revisited"
    assert result.metadata == {"author": "A. Author"}
    assert _sections(result) == [
        (None, 1),
        ("Abstract", 1),
        ("1 Introduction", 1),
        ("2 Methods", 2),
        ("2.1 Training Data", 2),
        ("2.1 Training Data", 3),  # the section goes on over the page break
        ("3 Results", 3),
        ("References", 4),
    ]
    text = _all_text(result)
    assert "Journal of Retrieval" not in text and "Page " not in text
    abstract = result.blocks[1].text
    assert abstract == "We study retrieval of documents over large collections with a bi-Encoder and a BM-25 baseline."
    # Lines of a paragraph are joined with spaces; a body line starting with a number after a line
    # that ends mid-sentence is not a section title.
    assert result.blocks[3].text == (
        "We sampled queries from the logs of a search engine and the 100 Participants were recruited from a panel."
    )


def test_pdf_title_from_first_line_without_metadata_title(tmp_path: Path) -> None:
    path = write_paper_pdf(tmp_path / "paper.pdf", title=None)
    assert extract(path, path.read_bytes()).title == "Sparse and Dense Retrieval Revisited"


def test_pdf_failures(tmp_path: Path) -> None:
    paper = write_paper_pdf(tmp_path / "paper.pdf")
    scan = write_scan_pdf(tmp_path / "scan.pdf")
    with pytest.raises(ExtractionFailed) as no_text:
        extract(scan, scan.read_bytes())
    assert no_text.value.reason == QuarantineReason.NO_TEXT_LAYER and "2 pages" in no_text.value.detail

    encrypted = write_encrypted_pdf(tmp_path / "locked.pdf", paper)
    assert _reason(encrypted, encrypted.read_bytes()) == QuarantineReason.ENCRYPTED_FILE

    with pytest.raises(ExtractionFailed) as truncated:
        extract(paper, paper.read_bytes()[:300])
    assert truncated.value.reason == QuarantineReason.CORRUPT_FILE and "PDFium" in truncated.value.detail
    assert _reason(paper, b"not a pdf at all") == QuarantineReason.CORRUPT_FILE


@pytest.mark.parametrize(
    ("info_title", "expected"),
    [
        (None, "Font Sizes Reveal the Real Title"),
        ("ipg1300180a", "Font Sizes Reveal the Real Title"),  # a job name
        ("Proceedings Template - WORD", "Font Sizes Reveal the Real Title"),
        ("Results on Two Benchmarks", "Font Sizes Reveal the Real Title"),  # disagrees: the printed title wins
        ("Font sizes reveal the real title", "Font sizes reveal the real title"),  # agrees: it wins
    ],
)
def test_pdf_title_in_the_largest_font_below_banners(tmp_path: Path, info_title: str | None, expected: str) -> None:
    first_page = [
        (9, "Journal of Retrieval Studies 3 (2024) 1-9"),
        (24, "R E S E A R C H  A R T I C L E   Open Access"),  # larger than the title, but a banner
        (20, "Font Sizes Reveal"),
        (20, "the Real Title"),
        (11, "A. Author and B. Author"),
        *((10, line) for line in BODY_LINES * 3),
    ]
    path = write_lines_pdf(tmp_path / "paper.pdf", [first_page], title=info_title)
    result = extract(path, path.read_bytes())
    assert result.title == expected
    assert "Font Sizes Reveal the Real Title" in _all_text(result)  # the title stays in the text


def test_pdf_alternating_running_heads_are_dropped(tmp_path: Path) -> None:
    # Even pages carry "<n> SMITH", odd pages but the first "SHORT TITLE OF THE PAPER <n>": each is on
    # 3 of 7 pages, less than half of all pages, but on at least half of the even (or odd) pages.
    def running_head(page: int) -> str | None:
        if page == 1:
            return None
        return f"{page} SMITH" if page % 2 == 0 else f"SHORT TITLE OF THE PAPER {page}"

    pages = [
        [(11, f"{number} Part {chr(64 + number)}"), *((11, line) for line in BODY_LINES)] for number in range(1, 8)
    ]
    path = write_lines_pdf(tmp_path / "book.pdf", pages, running_head=running_head)
    result = extract(path, path.read_bytes())

    assert _sections(result) == [(f"{number} Part {chr(64 + number)}", number) for number in range(1, 8)]
    text = _all_text(result)
    assert "SMITH" not in text and "SHORT TITLE" not in text


def test_pdf_symbol_soup_text_layer_needs_ocr(tmp_path: Path) -> None:
    # Fonts without a Unicode map extract as their raw codes: ASCII symbols and a few letters.
    soup = [(11, '! #"$%&()*+,-./0123 :;<=>?@[]^_{|}~ AbC')] * 6
    readable = [(11, line) for line in BODY_LINES]
    unreadable = write_lines_pdf(tmp_path / "type3.pdf", [soup, soup, readable])
    with pytest.raises(ExtractionFailed) as failure:
        extract(unreadable, unreadable.read_bytes())
    assert failure.value.reason == QuarantineReason.NO_TEXT_LAYER
    assert "needs OCR" in failure.value.detail and "2 of 3 pages" in failure.value.detail

    # One page of symbols (a table of numbers, say) among readable ones is kept.
    mostly_readable = write_lines_pdf(tmp_path / "table.pdf", [readable, soup, readable])
    assert extract(mostly_readable, mostly_readable.read_bytes()).pages == 3


# HTML


def test_html_main_text_with_headings_and_without_boilerplate() -> None:
    result = extract(Path("guide.html"), PAPER_HTML)

    assert result.format == "html" and result.pages is None
    assert result.title == "Dense Retrieval"
    assert result.metadata == {"author": "Jane Doe"}
    assert [block.heading for block in result.blocks] == ["Dense Retrieval", "Training", "Evaluation"]
    text = _all_text(result)
    for boilerplate in ("About us", "cookies", "Copyright", "Privacy"):
        assert boilerplate not in text
    assert "BM25 | 0.43" in result.blocks[1].text
    assert result.blocks[2].text == "We evaluate on BEIR with nDCG@10 and recall."


def test_html_short_page_charsets_and_empty() -> None:
    short = extract(Path("a.htm"), b"<html><head><title>Hi</title></head><body><p>Short note.</p></body></html>")
    assert short.title == "Hi" and _all_text(short) == "Short note."

    latin = "<html><head><meta charset='iso-8859-1'></head><body><p>Caf\xe9 au lait.</p></body></html>"
    assert _all_text(extract(Path("a.html"), latin.encode("latin-1"))) == "Café au lait."

    assert _reason(Path("a.html"), b"<p>\xff\xfe broken</p>") == QuarantineReason.INVALID_UTF8
    assert _reason(Path("a.html"), b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR") == QuarantineReason.INVALID_UTF8
    assert extract(Path("a.html"), b"<html><body><script>var x = 1;</script></body></html>").blocks == []


# Markdown


def test_markdown_headings_front_matter_and_code() -> None:
    result = extract(Path("notes.md"), NOTES_MD.encode())

    assert result.format == "markdown"
    assert result.title == "Retrieval Notes"
    assert result.metadata == {"author": "Jane Doe", "tags": ["retrieval", "notes"]}
    assert [block.heading for block in result.blocks] == ["Overview", "Sharding", "Setext Section"]
    overview, sharding, setext = (block.text for block in result.blocks)
    assert overview == "Some inline code and a link and a diagram."
    assert sharding == "Shards split the corpus.\n\n# not a heading\nmake index"
    assert setext == "shard | docs\n\na | 10"
    assert "title:" not in _all_text(result)


def test_markdown_title_from_first_h1_and_undecodable_bytes() -> None:
    plain = extract(Path("a.markdown"), b"\xef\xbb\xbfIntro line.\n\n## Second\n\ntext\n\n# First H1\n\nbody\n")
    assert plain.title == "First H1"
    assert plain.blocks[0].heading is None and plain.blocks[0].text == "Intro line."
    assert extract(Path("a.md"), b"Just text.\n").title is None

    assert _reason(Path("image.md"), b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR") == QuarantineReason.INVALID_UTF8
    assert _reason(Path("latin.md"), "caf\xe9".encode("latin-1")) == QuarantineReason.INVALID_UTF8


# DOCX


def test_docx_headings_tables_and_title(tmp_path: Path) -> None:
    path = write_report_docx(tmp_path / "report.docx")
    result = extract(path, path.read_bytes())

    assert result.format == "docx"
    assert result.title == "Quarterly Retrieval Report"
    assert result.metadata == {"author": "Jane Doe"}
    assert [(block.heading, block.text) for block in result.blocks] == [
        ("Quarterly Retrieval Report", "Opening remarks before any section."),
        ("Findings", "Recall went up."),
        ("Details", "metric | value\n\nrecall 0.9"),
    ]


def test_docx_title_from_properties_then_first_heading(tmp_path: Path) -> None:
    document = docx.Document()
    document.add_heading("Only Section", 1)
    document.add_paragraph("Body.")
    assert extract(Path("a.docx"), _docx_bytes(document)).title == "Only Section"
    document.core_properties.title = "From Properties"
    assert extract(Path("a.docx"), _docx_bytes(document)).title == "From Properties"


def test_docx_failures(tmp_path: Path) -> None:
    report = write_report_docx(tmp_path / "report.docx").read_bytes()
    assert _reason(Path("a.docx"), report[: len(report) // 2]) == QuarantineReason.CORRUPT_FILE
    assert _reason(Path("a.docx"), b"plain text named docx") == QuarantineReason.CORRUPT_FILE
    ole = bytes.fromhex("D0CF11E0A1B11AE1") + bytes(504)
    encrypted = ole + "EncryptionInfo".encode("utf-16-le") + bytes(64) + "EncryptedPackage".encode("utf-16-le")
    assert _reason(Path("a.docx"), encrypted) == QuarantineReason.ENCRYPTED_FILE
    assert _reason(Path("a.docx"), ole + "WordDocument".encode("utf-16-le")) == QuarantineReason.UNSUPPORTED_FORMAT


# Plain text and dispatch


def test_text_title_bom_and_binary() -> None:
    result = extract(Path("README.TXT"), b"\xef\xbb\xbf\n  A Short Title\n\nBody text here.\r\n")
    assert result.format == "text" and result.title == "A Short Title"
    assert result.blocks[0].text == "A Short Title\n\nBody text here."
    long_first_line = " ".join(["word"] * 16)
    assert extract(Path("a.txt"), long_first_line.encode()).title is None
    assert _reason(Path("a.txt"), b"text\x00with NUL") == QuarantineReason.INVALID_UTF8
    assert _reason(Path("a.txt"), b"\xc3\x28") == QuarantineReason.INVALID_UTF8


def test_unsupported_extension_names_the_supported_ones() -> None:
    with pytest.raises(ExtractionFailed) as failure:
        extract(Path("data.xyz"), b"anything")
    assert failure.value.reason == QuarantineReason.UNSUPPORTED_FORMAT
    assert "'.xyz'" in failure.value.detail and ".pdf" in failure.value.detail and ".md" in failure.value.detail
    assert _reason(Path("Makefile"), b"all:") == QuarantineReason.UNSUPPORTED_FORMAT
