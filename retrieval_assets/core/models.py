"""Domain records shared by every stage of the pipeline."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

# Scalar metadata values that every backend can filter on.
MetadataValue = str | int | float | bool | list[str]


class Strategy(StrEnum):
    """A retrieval strategy; it also names the index that serves it, whatever its engine."""

    BM25 = "bm25"
    SPLADE = "splade"
    DENSE = "dense"


class FusionMethod(StrEnum):
    """How per-strategy result lists become one ranking (``retrieval.fusion``)."""

    RRF = "rrf"
    MINMAX = "minmax"
    ZSCORE = "zscore"
    SIMILARITY_RRF = "similarity_rrf"


class TextSpan(BaseModel):
    """A run of a structured document's text under one heading and on one page.

    A document extracted from a file (``ingest.sources``) keeps its structure as spans that cover
    its text in order, each ``length`` characters long and separated by one newline, so the
    chunker can cut at headings and tell each chunk's pages."""

    model_config = ConfigDict(frozen=True)

    heading: str | None = None  # the nearest heading above the text; None before the first one
    page: int | None = None  # 1-based page of paged formats
    length: int


class Document(BaseModel):
    """One cleaned catalog record (a tool, a paper, an abstract, a file)."""

    model_config = ConfigDict(frozen=True)

    doc_id: str
    title: str = ""
    text: str
    tenant_id: str = "default"
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)
    # Empty for unstructured records; the chunker then finds sections in the text itself.
    structure: list[TextSpan] = Field(default_factory=list)
    # Precomputed dense vectors the record carried, by model name (``embedding:<model>`` fields,
    # docs/sources.md#precomputed-vectors); checked by cleaning, not yet normalised.
    vectors: dict[str, list[float]] = Field(default_factory=dict)


class QuarantineRecord(BaseModel):
    """A raw row that could not be turned into a Document, kept with why."""

    source: str
    line_number: int | None = None
    doc_id: str | None = None
    reason: str
    detail: str = ""
    raw: str = ""


def document_key(tenant_id: str, doc_id: str) -> str:
    """A document's identity across tenants: ``{tenant}/{doc_id}``, the tenant percent-encoded.

    Document ids live in their tenant's namespace (two tenants may hold the same id), so what
    must name one document among every tenant's (chunk ids, a search's collapse key) is qualified
    by the tenant. The encoded tenant holds no ``/``, so the first ``/`` ends it and no two
    (tenant, id) pairs share a key."""
    return f"{quote(tenant_id, safe='')}/{doc_id}"


def chunk_document(chunk_id: str, doc_id: str) -> str:
    """The ``document_key`` a chunk id names (its part before ``#{ordinal}``). A chunk id of a
    version built before ids were qualified by tenant (``{doc_id}#{ordinal}``), or one with no
    ordinal, names its document by ``doc_id`` alone, as that version did."""
    head, separator, _ = chunk_id.rpartition("#")
    return head if separator and head != doc_id else doc_id


def embedding_text(title: str | None, text: str) -> str:
    """What encoders see of a chunk: the title gives every chunk of a document its topic."""
    return f"{title}\n{text}" if title else text


class Chunk(BaseModel):
    """A retrievable unit of a document; ``chunk_id`` is deterministic:
    ``{tenant}/{doc_id}#{ordinal}`` (``make_id``)."""

    model_config = ConfigDict(frozen=True)

    chunk_id: str
    doc_id: str
    ordinal: int
    tenant_id: str = "default"
    section: str = "body"
    title: str = ""
    text: str
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)
    # SHA-256 of the embedding text and the chunker config; embeddings are cached under it.
    content_hash: str = ""
    # The document's precomputed vectors by model name, when the document is this one chunk; None
    # for each model on the chunks of a document cut into several (its vectors match none of them).
    vectors: dict[str, list[float] | None] = Field(default_factory=dict)

    @staticmethod
    def make_id(doc_id: str, ordinal: int, *, tenant_id: str) -> str:
        """The chunk's id: its document's ``document_key`` and its ordinal, so that two tenants'
        documents with the same id never share a chunk id in any index. Versions built before
        (``{doc_id}#{ordinal}``) stay readable: nothing parses a chunk id but its ordinal."""
        return f"{document_key(tenant_id, doc_id)}#{ordinal}"

    @property
    def embedding_text(self) -> str:
        return embedding_text(self.title, self.text)


class SparseVector(BaseModel):
    """Term-id -> weight pairs from a learned sparse encoder (SPLADE)."""

    indices: list[int]
    values: list[float]


class StoreHit:
    """What an index store returns: a chunk id, its score, its document and the stored payload.

    A slotted class rather than a pydantic model, and the payload may come from ``load`` on
    first use: a search builds a few hundred hits and returns ten, and building them as models
    and decoding every payload was a tenth of a query's CPU (docs/benchmarks/http-load.md)."""

    __slots__ = ("_load", "_payload", "chunk_id", "doc_id", "score")

    def __init__(
        self,
        chunk_id: str,
        score: float,
        payload: dict[str, Any] | None = None,
        *,
        doc_id: str | None = None,
        load: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        if payload is None and load is None:
            payload = {}
        if doc_id is None:
            if payload is None:
                raise TypeError("StoreHit with a lazy payload needs doc_id")
            doc_id = payload.get("doc_id", "")
        self.chunk_id = chunk_id
        self.score = score
        self.doc_id = doc_id
        self._payload = payload
        self._load = load

    @property
    def payload(self) -> dict[str, Any]:
        if self._payload is None:
            assert self._load is not None
            self._payload, self._load = self._load(), None
        return self._payload

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoreHit):
            return NotImplemented
        return (self.chunk_id, self.score, self.payload) == (other.chunk_id, other.score, other.payload)

    __hash__ = None  # type: ignore[assignment]  # mutable payload, as a model's

    def __repr__(self) -> str:
        return f"StoreHit(chunk_id={self.chunk_id!r}, score={self.score!r}, doc_id={self.doc_id!r})"


class StrategyScore(BaseModel):
    """One retrieval strategy's view of a hit."""

    score: float
    rank: int


class ScoredHit(BaseModel):
    """A fused result with its provenance.

    ``strategy_scores`` holds each retrieval strategy's score and rank, plus ``graph`` for a
    tool added by knowledge-graph expansion (``graph_path`` says how it was reached) and
    ``rerank`` for a hit the cross-encoder scored (``first_stage_rank`` is its rank before).
    """

    doc_id: str
    chunk_id: str
    text: str
    title: str = ""
    section: str = "body"
    tenant_id: str = "default"
    score: float
    strategy_scores: dict[str, StrategyScore] = Field(default_factory=dict)
    first_stage_rank: int | None = None
    graph_path: list[str] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class SearchRequest(BaseModel):
    """One query and everything that shapes it; ``None`` options use the configured default."""

    query: str
    top_k: int = Field(10, ge=1)
    filters: dict[str, Any] | None = None
    tenant_id: str | None = None
    # The tenants the caller may see (an API key's grant): results come only from these, and
    # from ``tenant_id`` when both are given. None: no grant applies.
    tenants: list[str] | None = None
    strategies: list[Strategy] | None = None
    fusion: FusionMethod | None = None
    rerank: bool | None = None
    expand: bool | None = None
    multi_query: bool | None = None
    # Attached context: file names (``scan.dcm``) and metadata (``{"modality": "CT"}``).
    context_files: list[str] = Field(default_factory=list)
    context_metadata: dict[str, Any] = Field(default_factory=dict)


class RetrievalResult(BaseModel):
    """The answer to one query, with what produced it."""

    query: str
    hits: list[ScoredHit]
    strategies: list[str]
    fusion: str
    reranked: bool = False
    # The query asked to be refined ([REFINE]); surfaced for the caller to act on.
    refine: bool = False
    timings_ms: dict[str, float] = Field(default_factory=dict)
    diagnostics: dict[str, Any] = Field(default_factory=dict)
