"""Chunker port and its two adapters: plain sliding windows and IMRaD section-aware windows.

Both adapters window whitespace-separated words the same way; the section-aware one first
splits the text at section headings so that no chunk straddles, say, Methods and Results,
and records the normalised section name on each chunk. Chunk ids are ``{tenant}/{doc_id}#{ordinal}``
(``Chunk.make_id``) with ordinals ``0..n-1`` per document, so re-chunking the same text gives the
same ids, and two tenants' documents with the same id have distinct chunks.
Heading words stay in the chunk text: every word of the document lands in some chunk.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Literal

from retrieval_assets.core.models import Chunk, Document

ChunkerKind = Literal["section_aware", "sliding_window"]
BODY = "body"  # section name for text before the first heading, and for all text of a plain window

# Heading phrases (lower case, single spaces) -> normalised section. Covers IMRaD paper headings
# and the structured-abstract labels of PubMed, JAMA, BMJ and Lancet abstracts.
_SECTION_PHRASES: dict[str, tuple[str, ...]] = {
    "abstract": ("abstract", "summary", "unlabelled"),
    "background": (
        "background", "backgrounds", "context", "rationale", "importance", "motivation", "related work",
        "background and purpose", "background and aims", "background and objectives", "background and objective",
    ),
    "introduction": (
        "introduction", "objective", "objectives", "aim", "aims", "aims and objectives", "purpose",
        "purpose of review", "goal", "goals", "study objective", "study objectives",
    ),
    "methods": (
        "methods", "method", "methodology", "materials and methods", "material and methods", "methods and materials",
        "patients and methods", "subjects and methods", "experimental procedures", "design", "study design",
        "experimental design", "research design and methods", "design and methods", "design and setting",
        "setting", "settings", "setting and participants", "setting and patients", "participants", "patients",
        "subjects", "intervention", "interventions", "exposure", "exposures", "measurements", "main outcome",
        "main outcome measure", "main outcome measures", "main outcomes and measures", "outcome measures",
        "data sources", "data sources and study selection", "study selection", "data extraction",
        "data collection and analysis", "search strategy", "selection criteria", "review methods",
        "methods and results", "methods and findings",
    ),
    "results": (
        "results", "result", "findings", "main results", "key results", "recent findings",
        "measurements and main results", "results and discussion", "data synthesis",
    ),
    "discussion": ("discussion", "limitations", "discussion and conclusion", "discussion and conclusions"),
    "conclusion": (
        "conclusion", "conclusions", "conclusions and relevance", "concluding remarks", "interpretation",
        "implications", "summary and conclusions",
    ),
    "other": (
        "acknowledgements", "acknowledgments", "funding", "sponsorship", "trial registration",
        "clinical trial registration", "availability", "availability and implementation", "contact",
        "supplementary information", "supplementary material", "significance", "significance statement",
        "abbreviations", "references",
    ),
}
_PHRASE_TO_SECTION = {phrase: section for section, phrases in _SECTION_PHRASES.items() for phrase in phrases}
# Longest first, so "methods and results" wins over "methods".
_LABEL = "|".join(
    r"\s+".join(map(re.escape, phrase.split())) for phrase in sorted(_PHRASE_TO_SECTION, key=len, reverse=True)
)
# A whole line that is a heading: "Results", "2. Methods", "IV) DISCUSSION:".
_HEADING_LINE = re.compile(rf"^\s*(?:(?:\d+(?:\.\d+)*|[IVX]+)[.)]?\s+)?(?P<label>{_LABEL})\s*[:.]?\s*$", re.IGNORECASE)
# An inline structured-abstract label at a line or sentence start, followed by a colon or a space:
# "BACKGROUND ...", "Methods: ...".
_INLINE_LABEL = re.compile(
    rf"(?:^|(?<=[.!?])[\"')\]]?\s+)(?P<label>{_LABEL})(?:(?P<colon>\s*:)|(?=\s))", re.IGNORECASE
)


def _section_of(label: str) -> str:
    return _PHRASE_TO_SECTION[" ".join(label.lower().split())]


def split_sections(text: str) -> list[tuple[str, str]]:
    """Split text into ``(section, text)`` runs at headings; text before the first one is ``body``.

    Inline labels count only when followed by a colon or written in capitals, so that a
    sentence starting with "Results were ..." is not taken for a heading.
    """
    pieces: list[tuple[str, str]] = []
    current = BODY
    for line in text.split("\n"):
        heading = _HEADING_LINE.match(line)
        if heading:
            current = _section_of(heading.group("label"))
            pieces.append((current, line))
            continue
        position = 0
        for match in _INLINE_LABEL.finditer(line):
            label = match.group("label")
            if not (match.group("colon") or label.isupper()):
                continue
            pieces.append((current, line[position : match.start("label")]))
            current, position = _section_of(label), match.start("label")
        pieces.append((current, line[position:]))

    sections: list[tuple[str, str]] = []
    for section, piece in pieces:
        if not piece.strip():
            continue
        if sections and sections[-1][0] == section:
            sections[-1] = (section, f"{sections[-1][1]}\n{piece}")
        else:
            sections.append((section, piece))
    return sections


# A run of words to window on its own: its section, its words and each word's page (None when
# the document has no pages).
_Run = tuple[str, list[str], list[int | None]]
# Longest section name kept from a heading that is not an IMRaD name.
_MAX_SECTION_CHARS = 80


def heading_section(heading: str | None) -> str:
    """The section a structured document's heading names: the IMRaD name for "2. Methods" or
    "RESULTS", else the heading itself (so a hit in a manual says "Installation"); ``body``
    before the first heading."""
    if heading is None or not heading.strip():
        return BODY
    match = _HEADING_LINE.match(heading)
    if match:
        return _section_of(match.group("label"))
    return " ".join(heading.split())[:_MAX_SECTION_CHARS]


def structured_runs(doc: Document) -> list[_Run]:
    """A structured document's words by heading, each with the page it is on (``TextSpan``s)."""
    runs: list[_Run] = []
    position, last_heading = 0, object()
    for span in doc.structure:
        words = doc.text[position : position + span.length].split()
        position += span.length + 1  # spans are joined by one newline
        if runs and span.heading == last_heading:
            runs[-1][1].extend(words)
            runs[-1][2].extend([span.page] * len(words))
        else:
            runs.append((heading_section(span.heading), words, [span.page] * len(words)))
        last_heading = span.heading
    return [run for run in runs if run[1]]


class Chunker(ABC):
    """Port: split a document into chunks with ids ``{tenant}/{doc_id}#{ordinal}`` (``Chunk.make_id``)."""

    @abstractmethod
    def chunk(self, doc: Document) -> list[Chunk]: ...


class WindowedChunker(Chunker):
    """Shared word windowing; subclasses decide how the text is split into sections first.

    A structured document (one extracted from a file) is split at its own headings rather than
    at headings found in its text, and each chunk records the pages it spans as
    ``page_start``/``page_end`` metadata."""

    splits_text = False  # whether an unstructured text is split at headings found in it

    def __init__(self, window_words: int = 256, overlap_words: int = 32) -> None:
        if window_words < 1:
            raise ValueError(f"window_words must be positive, got {window_words}")
        if overlap_words < 0:
            raise ValueError(f"overlap_words must be zero or positive, got {overlap_words}")
        if overlap_words >= window_words:
            raise ValueError(f"overlap_words ({overlap_words}) must be smaller than window_words ({window_words})")
        self.window_words = window_words
        self.overlap_words = overlap_words

    @abstractmethod
    def runs(self, runs: list[_Run]) -> list[_Run]:
        """The runs to window independently, from a document's runs by section."""

    def window_starts(self, words: int) -> range:
        """Starts of windows of ``window_words`` words, each sharing ``overlap_words`` with the
        previous one. A new window starts only while it would add words the previous one lacked."""
        if not words:
            return range(0)
        return range(0, max(words - self.overlap_words, 1), self.window_words - self.overlap_words)

    def windows(self, words: list[str]) -> list[list[str]]:
        return [words[start : start + self.window_words] for start in self.window_starts(len(words))]

    def chunk(self, doc: Document) -> list[Chunk]:
        if doc.structure:
            runs = structured_runs(doc)
        else:
            runs = []
            for section, text in split_sections(doc.text) if self.splits_text else [(BODY, doc.text)]:
                words = text.split()
                runs.append((section, words, [None] * len(words)))
        chunks: list[Chunk] = []
        for section, words, pages in self.runs(runs):
            for start in self.window_starts(len(words)):
                ordinal = len(chunks)
                window_pages = [page for page in pages[start : start + self.window_words] if page is not None]
                metadata = doc.metadata
                if window_pages:
                    metadata = {**metadata, "page_start": min(window_pages), "page_end": max(window_pages)}
                chunks.append(
                    Chunk(
                        chunk_id=Chunk.make_id(doc.doc_id, ordinal, tenant_id=doc.tenant_id),
                        doc_id=doc.doc_id,
                        ordinal=ordinal,
                        tenant_id=doc.tenant_id,
                        section=section,
                        title=doc.title,
                        text=" ".join(words[start : start + self.window_words]),
                        metadata=metadata,
                    )
                )
        return chunks


class SlidingWindowChunker(WindowedChunker):
    """Word windows over the whole text, all in section ``body``."""

    def runs(self, runs: list[_Run]) -> list[_Run]:
        words = [word for _, run_words, _ in runs for word in run_words]
        pages = [page for _, _, run_pages in runs for page in run_pages]
        return [(BODY, words, pages)] if words else []


class SectionAwareChunker(WindowedChunker):
    """Word windows within IMRaD sections and structured-abstract parts, or within a structured
    document's own headings.

    Adjacent sections are packed together while they fit one window, so a short structured
    abstract stays one chunk (a 10-word "BACKGROUND" chunk retrieves poorly on its own) and
    chunk boundaries fall on section boundaries only where the text must be split anyway.
    A packed run is named after the section holding most of its words.
    """

    splits_text = True

    def runs(self, runs: list[_Run]) -> list[_Run]:
        packed: list[list[_Run]] = []
        packed_words = 0
        for run in runs:
            words = len(run[1])
            if packed and packed_words + words <= self.window_words:
                packed[-1].append(run)
                packed_words += words
            else:
                packed.append([run])
                packed_words = words
        return [
            (
                _dominant_section(group),
                [word for _, words, _ in group for word in words],
                [page for _, _, pages in group for page in pages],
            )
            for group in packed
        ]


def _dominant_section(group: list[_Run]) -> str:
    words: dict[str, int] = {}
    for section, run_words, _ in group:
        words[section] = words.get(section, 0) + len(run_words)
    return max(words, key=lambda section: words[section])  # ties: the earlier section


def make_chunker(kind: ChunkerKind, window_words: int = 256, overlap_words: int = 32) -> Chunker:
    """The chunker for a configured kind."""
    chunkers: dict[str, type[WindowedChunker]] = {
        "section_aware": SectionAwareChunker,
        "sliding_window": SlidingWindowChunker,
    }
    if kind not in chunkers:
        raise ValueError(f"unknown chunker kind {kind!r}; expected one of {sorted(chunkers)}")
    return chunkers[kind](window_words, overlap_words)
