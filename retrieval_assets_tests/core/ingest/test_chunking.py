"""Chunkers (sliding window, section-aware) and the chunk frames around them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from retrieval_assets.core.ingest.chunking import (
    SectionAwareChunker,
    SlidingWindowChunker,
    make_chunker,
    split_sections,
)
from retrieval_assets.core.io.tables import CHUNK_COLUMNS, chunk_payloads, chunks_to_frame, frame_to_chunks
from retrieval_assets.core.models import Chunk, Document, chunk_document, document_key


def _words(n: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def _doc(text: str, **fields: object) -> Document:
    return Document(doc_id="d1", text=text, **fields)


@pytest.mark.parametrize(
    ("n_words", "expected"),
    [
        (10, ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]),
        (11, ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9", "w9 w10"]),
        (4, ["w0 w1 w2 w3"]),
        (2, ["w0 w1"]),
        (0, []),
    ],
)
def test_sliding_windows_are_exact(n_words: int, expected: list[str]) -> None:
    chunks = SlidingWindowChunker(window_words=4, overlap_words=1).chunk(_doc(_words(n_words)))
    assert [c.text for c in chunks] == expected
    assert [c.ordinal for c in chunks] == list(range(len(expected)))
    assert [c.chunk_id for c in chunks] == [f"default/d1#{i}" for i in range(len(expected))]
    assert all(c.section == "body" for c in chunks)


def test_zero_overlap_and_whitespace_words() -> None:
    chunks = SlidingWindowChunker(window_words=3, overlap_words=0).chunk(_doc("a  b\n\nc\td e"))
    assert [c.text for c in chunks] == ["a b c", "d e"]


def test_default_window_keeps_short_documents_whole() -> None:
    text = _words(200)
    assert [c.text for c in make_chunker("sliding_window").chunk(_doc(text))] == [text]


def test_chunks_carry_document_fields_and_ids_are_deterministic() -> None:
    doc = _doc(_words(30), title="A title", tenant_id="acme", metadata={"license": "MIT", "tags": ["x"]})
    chunker = SlidingWindowChunker(window_words=8, overlap_words=2)
    first, again = chunker.chunk(doc), chunker.chunk(doc)
    assert first == again
    assert all(c.doc_id == "d1" and c.tenant_id == "acme" and c.title == "A title" for c in first)
    assert all(c.metadata == {"license": "MIT", "tags": ["x"]} for c in first)
    assert first[0].embedding_text == f"A title\n{first[0].text}"
    assert Chunk(chunk_id="x#0", doc_id="x", ordinal=0, text="plain").embedding_text == "plain"


@pytest.mark.parametrize(
    ("window", "overlap", "message"),
    [(0, 0, "window_words must be positive"), (4, -1, "overlap_words must be zero or positive"), (4, 4, "smaller")],
)
def test_invalid_window_parameters(window: int, overlap: int, message: str) -> None:
    for kind in ("sliding_window", "section_aware"):
        with pytest.raises(ValueError, match=message):
            make_chunker(kind, window, overlap)  # type: ignore[arg-type]


def test_make_chunker_kinds() -> None:
    assert isinstance(make_chunker("section_aware", 64, 8), SectionAwareChunker)
    chunker = make_chunker("sliding_window", 64, 8)
    assert isinstance(chunker, SlidingWindowChunker)
    assert (chunker.window_words, chunker.overlap_words) == (64, 8)
    with pytest.raises(ValueError, match="unknown chunker kind"):
        make_chunker("semantic", 64, 8)  # type: ignore[arg-type]


PAPER = """A preamble line before any heading.
Abstract
We study things.
1. Introduction
Things matter.
2. MATERIALS AND METHODS
We measured things.
Results:
Things went up.
IV) Discussion
Things are complex.
Conclusions
Things matter more.
Related work
Others studied things.
Acknowledgements
Thanks."""


def test_imrad_heading_lines() -> None:
    assert [section for section, _ in split_sections(PAPER)] == [
        "body",
        "abstract",
        "introduction",
        "methods",
        "results",
        "discussion",
        "conclusion",
        "background",
        "other",
    ]
    # A window of 6 words cannot pack two sections: chunk boundaries fall on the headings.
    chunks = SectionAwareChunker(window_words=6, overlap_words=0).chunk(_doc(PAPER))
    assert [(c.ordinal, c.section, c.text) for c in chunks[:3]] == [
        (0, "body", "A preamble line before any heading."),
        (1, "abstract", "Abstract We study things."),
        (2, "introduction", "1. Introduction Things matter."),
    ]
    # Every word of the document lands in exactly one chunk (no overlap needed here).
    assert " ".join(c.text for c in chunks).split() == PAPER.split()


def test_short_sections_are_packed_into_one_window() -> None:
    chunks = SectionAwareChunker(window_words=256, overlap_words=32).chunk(_doc(PAPER))
    assert len(chunks) == 1 and chunks[0].text.split() == PAPER.split()
    packed = SectionAwareChunker(window_words=12, overlap_words=0).chunk(_doc(PAPER))
    # Packed runs are named after the section with most words ("abstract" joins the preamble's run).
    assert [c.section for c in packed] == ["body", "methods", "discussion", "background"]
    assert " ".join(c.text for c in packed).split() == PAPER.split()


def test_structured_abstract_labels() -> None:
    text = (
        "BACKGROUND Cells die. DESIGN, in capitals but followed by a comma. OBJECTIVE: To see why. "
        "METHODS AND RESULTS We used mice. Results were mixed. "
        "Findings: 5 of 8 mice lived. CONCLUSIONS AND RELEVANCE It works. TRIAL REGISTRATION NCT01."
    )
    sections = split_sections(text)
    assert [name for name, _ in sections] == ["background", "introduction", "methods", "results", "conclusion", "other"]
    assert dict(sections)["background"] == "BACKGROUND Cells die. DESIGN, in capitals but followed by a comma. "
    assert dict(sections)["methods"] == "METHODS AND RESULTS We used mice. Results were mixed. "
    assert dict(sections)["results"] == "Findings: 5 of 8 mice lived. "


def test_lowercase_sentence_starts_are_not_labels() -> None:
    text = "Methods were compared. Results show gains. The discussion: ongoing."
    assert split_sections(text) == [("body", text)]


def test_sections_are_windowed_separately() -> None:
    text = f"Methods\n{_words(7, 'm')}\nResults\n{_words(3, 'r')}"
    chunks = SectionAwareChunker(window_words=4, overlap_words=1).chunk(_doc(text))
    assert [(c.section, c.text) for c in chunks] == [
        ("methods", "Methods m0 m1 m2"),
        ("methods", "m2 m3 m4 m5"),
        ("methods", "m5 m6"),
        ("results", "Results r0 r1 r2"),
    ]
    assert [c.chunk_id for c in chunks] == ["default/d1#0", "default/d1#1", "default/d1#2", "default/d1#3"]


def test_heading_free_document_matches_sliding_window() -> None:
    doc = _doc(f"{_words(40)}\nmore text on a second line\n\n{_words(25, 'v')}", title="T", metadata={"k": 1})
    section_aware = SectionAwareChunker(window_words=16, overlap_words=4).chunk(doc)
    sliding = SlidingWindowChunker(window_words=16, overlap_words=4).chunk(doc)
    assert section_aware == sliding
    assert len(sliding) > 1 and all(c.section == "body" for c in section_aware)


def test_chunk_frames_round_trip(tmp_path: Path) -> None:
    doc = _doc(PAPER, title="Paper", tenant_id="lab", metadata={"year": 2020, "tags": ["a", "b"], "score": 0.5})
    chunks = SectionAwareChunker(window_words=4, overlap_words=1).chunk(doc)
    frame = chunks_to_frame(chunks)
    assert list(frame.columns) == list(CHUNK_COLUMNS)
    assert frame_to_chunks(frame) == chunks

    frame.to_parquet(tmp_path / "chunks.parquet")
    assert frame_to_chunks(pd.read_parquet(tmp_path / "chunks.parquet")) == chunks


def test_chunk_payloads_are_flat() -> None:
    doc = _doc("Methods\nWe did it.", title="Paper", metadata={"year": 2020, "tags": ["a", "b"], "open": True})
    (payload,) = chunk_payloads(chunks_to_frame(SectionAwareChunker().chunk(doc)))
    assert payload == {
        "doc_id": "d1",
        "chunk_id": "default/d1#0",
        "tenant_id": "default",
        "section": "methods",
        "title": "Paper",
        "text": "Methods We did it.",
        "year": 2020,
        "tags": ["a", "b"],
        "open": True,
    }


def test_empty_chunk_frames_have_columns() -> None:
    frame = chunks_to_frame([])
    assert list(frame.columns) == list(CHUNK_COLUMNS) and len(frame) == 0
    assert frame_to_chunks(frame) == [] and chunk_payloads(frame) == []


def _structured(blocks: list[tuple[str | None, int | None, str]]) -> Document:
    """A document as cleaning builds one from a file's blocks (``cleaning._structured_text``)."""
    from retrieval_assets.core.models import TextSpan

    text = "\n".join(body for _, _, body in blocks)
    spans = [TextSpan(heading=heading, page=page, length=len(body)) for heading, page, body in blocks]
    return Document(doc_id="paper.pdf", text=text, structure=spans, metadata={"format": "pdf"})


def test_a_structured_document_is_cut_at_its_own_headings_with_pages() -> None:
    doc = _structured(
        [
            (None, 1, _words(3, "front")),
            ("2. Methods", 1, _words(5, "m")),
            ("2. Methods", 2, _words(5, "n")),
            ("Installation notes", 3, _words(4, "i")),
        ]
    )
    chunks = SectionAwareChunker(window_words=6, overlap_words=0).chunk(doc)
    # Methods spans pages 1-2 and is windowed on its own; a heading that is no IMRaD name is the section itself.
    assert [(c.section, c.metadata["page_start"], c.metadata["page_end"]) for c in chunks] == [
        ("body", 1, 1),
        ("methods", 1, 2),
        ("methods", 2, 2),
        ("Installation notes", 3, 3),
    ]
    assert chunks[1].text == "m0 m1 m2 m3 m4 n0"
    assert all(c.metadata["format"] == "pdf" for c in chunks)
    # Every word lands in some chunk, and a sliding window keeps the pages but not the sections.
    assert sum(len(c.text.split()) for c in chunks) == len(doc.text.split())
    sliding = SlidingWindowChunker(window_words=20, overlap_words=0).chunk(doc)
    assert [(c.section, c.metadata["page_start"], c.metadata["page_end"]) for c in sliding] == [("body", 1, 3)]


def test_a_document_without_pages_has_no_page_metadata() -> None:
    doc = _structured([("Usage", None, "run it"), ("Usage", None, "then stop")])
    (chunk,) = SectionAwareChunker(window_words=50, overlap_words=0).chunk(doc)
    assert (chunk.section, chunk.text) == ("Usage", "run it then stop")
    assert "page_start" not in chunk.metadata


def test_chunk_ids_name_the_tenant_so_two_tenants_may_hold_an_id() -> None:
    """Ids live in a tenant's namespace: the same document id of two tenants gives distinct chunk
    ids, with the tenant percent-encoded so that no (tenant, id) pair can pass for another."""
    chunker = SlidingWindowChunker(window_words=4, overlap_words=1)
    ids = {
        tenant: [c.chunk_id for c in chunker.chunk(_doc(_words(6), tenant_id=tenant))]
        for tenant in ("alpha", "beta", "a/b", "a%2Fb")
    }
    assert ids["alpha"] == ["alpha/d1#0", "alpha/d1#1"] and ids["beta"] == ["beta/d1#0", "beta/d1#1"]
    assert ids["a/b"][0] == "a%2Fb/d1#0" and ids["a%2Fb"][0] == "a%252Fb/d1#0"
    assert len({chunk_id for tenant_ids in ids.values() for chunk_id in tenant_ids}) == 8
    # Tenant "a" with id "b/c" and tenant "a/b" with id "c" stay apart.
    assert Chunk.make_id("b/c", 0, tenant_id="a") != Chunk.make_id("c", 0, tenant_id="a/b")
    # The document a chunk id names: tenant-qualified, or the bare id for a version built before.
    assert chunk_document("alpha/d1#3", "d1") == document_key("alpha", "d1") == "alpha/d1"
    assert chunk_document("d1#3", "d1") == "d1" and chunk_document("c1", "c1") == "c1"
    assert chunk_document("a#b#0", "a#b") == "a#b" and chunk_document("t/a#b#0", "a#b") == "t/a#b"
