"""Chunker port and its two adapters: plain sliding windows and IMRaD section-aware windows.

Both adapters window whitespace-separated words the same way; the section-aware one first
splits the text at section headings so that no chunk straddles, say, Methods and Results,
and records the normalised section name on each chunk. Chunk ids are ``{doc_id}#{ordinal}``
with ordinals ``0..n-1`` per document, so re-chunking the same text gives the same ids.
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


class Chunker(ABC):
    """Port: split a document into chunks with ids ``{doc_id}#{ordinal}``."""

    @abstractmethod
    def chunk(self, doc: Document) -> list[Chunk]: ...


class WindowedChunker(Chunker):
    """Shared word windowing; subclasses decide how the text is split into sections first."""

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
    def sections(self, text: str) -> list[tuple[str, str]]:
        """``(section, text)`` runs to window independently."""

    def windows(self, words: list[str]) -> list[list[str]]:
        """Windows of ``window_words`` words, each sharing ``overlap_words`` with the previous one.

        A new window starts only while it would add words the previous one lacked.
        """
        if not words:
            return []
        step = self.window_words - self.overlap_words
        last_start = max(len(words) - self.overlap_words, 1)
        return [words[start : start + self.window_words] for start in range(0, last_start, step)]

    def chunk(self, doc: Document) -> list[Chunk]:
        chunks: list[Chunk] = []
        for section, text in self.sections(doc.text):
            for window in self.windows(text.split()):
                ordinal = len(chunks)
                chunks.append(
                    Chunk(
                        chunk_id=Chunk.make_id(doc.doc_id, ordinal),
                        doc_id=doc.doc_id,
                        ordinal=ordinal,
                        tenant_id=doc.tenant_id,
                        section=section,
                        title=doc.title,
                        text=" ".join(window),
                        metadata=doc.metadata,
                    )
                )
        return chunks


class SlidingWindowChunker(WindowedChunker):
    """Word windows over the whole text, all in section ``body``."""

    def sections(self, text: str) -> list[tuple[str, str]]:
        return [(BODY, text)]


class SectionAwareChunker(WindowedChunker):
    """Word windows within IMRaD sections and structured-abstract parts.

    Adjacent sections are packed together while they fit one window, so a short structured
    abstract stays one chunk (a 10-word "BACKGROUND" chunk retrieves poorly on its own) and
    chunk boundaries fall on section boundaries only where the text must be split anyway.
    A packed run is named after the section holding most of its words.
    """

    def sections(self, text: str) -> list[tuple[str, str]]:
        packed: list[list[tuple[str, str]]] = []
        packed_words = 0
        for section, body in split_sections(text):
            words = len(body.split())
            if packed and packed_words + words <= self.window_words:
                packed[-1].append((section, body))
                packed_words += words
            else:
                packed.append([(section, body)])
                packed_words = words
        return [(_dominant_section(run), "\n".join(body for _, body in run)) for run in packed]


def _dominant_section(run: list[tuple[str, str]]) -> str:
    words: dict[str, int] = {}
    for section, body in run:
        words[section] = words.get(section, 0) + len(body.split())
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
