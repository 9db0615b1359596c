"""Build any BEIR directory in a scratch location and evaluate each retrieval configuration.

It uses exactly the pipeline steps the Dagster assets use, so its figures describe the product.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from retrieval_assets.core import pipeline
from retrieval_assets.core.catalog import CatalogSource, GoldSet, load_gold
from retrieval_assets.core.encoders.base import DenseEncoder, ProgressCallback, SparseEncoder
from retrieval_assets.core.evaluation import EvaluationReport, evaluate, latency_percentiles
from retrieval_assets.core.rerank.base import Reranker
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.search import open_retriever
from retrieval_assets.core.settings import PipelineSettings
from retrieval_assets.core.tables import chunks_to_frame
from retrieval_assets.core.vocabulary import build_vocabulary

# Configuration name -> search request options. "hybrid" is exactly what the query resource does
# by default (BM25 + dense, min-max fusion, no rerank); the others each change one thing.
CONFIGURATIONS: dict[str, dict[str, Any]] = {
    "bm25": {"strategies": ["bm25"]},
    "dense": {"strategies": ["dense"]},
    "splade": {"strategies": ["splade"]},
    "hybrid": {},
    "hybrid+splade": {"strategies": ["bm25", "splade", "dense"]},
    "hybrid_rrf": {"fusion": "rrf"},
    "hybrid_minmax": {"fusion": "minmax"},
    "hybrid_zscore": {"fusion": "zscore"},
    "hybrid_similarity_rrf": {"fusion": "similarity_rrf"},
    "hybrid+expansion": {"expand": True},
    "hybrid+multi_query": {"multi_query": True},
    "hybrid+rerank": {"rerank": True},
}
DEFAULT_CONFIGURATION = "hybrid"
EVAL_DEPTH = 100  # deep enough for recall@100

# (stage label) -> progress callback; lets the CLI show tqdm bars and Dagster write log lines.
ProgressFactory = Callable[[str], ProgressCallback | None]


def evaluate_configurations(
    retriever: HybridRetriever,
    gold: GoldSet,
    configurations: Mapping[str, Mapping[str, Any]] = CONFIGURATIONS,
    progress: ProgressFactory = lambda _: None,
) -> dict[str, EvaluationReport]:
    reports = {}
    for name, options in configurations.items():
        def search(query: str, options: Mapping[str, Any] = options) -> list[str]:
            return [hit.doc_id for hit in retriever.search(query, top_k=EVAL_DEPTH, **options).hits]

        reports[name] = evaluate(search, gold.queries, gold.qrels, progress=progress(f"eval {name}"))
    return reports


def query_encoding_p95_ms(encoder: DenseEncoder, queries: Mapping[str, str]) -> float:
    """Dense query encoding alone, one query at a time: the floor end-to-end latency is judged against."""
    latencies = []
    for text in queries.values():
        started = time.perf_counter()
        encoder.encode_queries([text])
        latencies.append((time.perf_counter() - started) * 1000)
    return latency_percentiles(latencies)["p95_ms"]


def build_indexes(
    source: CatalogSource,
    layout: pipeline.IndexLayout,
    dense_encoder: DenseEncoder,
    sparse_encoder: SparseEncoder,
    settings: PipelineSettings,
    progress: ProgressFactory = lambda _: None,
) -> int:
    """Every index and the vocabulary of ``source`` under ``layout``; returns the document count.

    Its tables die with it, so queries are timed in a process that holds only what serving holds.
    """
    cleaned = pipeline.clean_catalog(pipeline.read_raw_catalog(source), source)
    chunks = pipeline.chunk_documents(cleaned.documents, settings.chunking)
    chunk_frame = chunks_to_frame(chunks)
    dense = pipeline.embed_dense(chunks, dense_encoder, progress("dense"))
    sparse = pipeline.embed_sparse(chunks, sparse_encoder, progress("sparse"))
    context = settings.retrieval.context_tokens
    for store in (
        pipeline.build_faiss_index(layout.faiss, chunk_frame, dense, dense_encoder.model_name, context),
        pipeline.build_qdrant_index(
            layout.qdrant, chunk_frame, dense, sparse, dense_encoder.model_name, sparse_encoder.model_name, context
        ),
        pipeline.build_lexical_index(layout.lexical, chunk_frame, context),
    ):
        store.close()
    pipeline.write_vocabulary(
        build_vocabulary(chunks, dense_encoder, settings.vocabulary, progress("vocabulary")), layout
    )
    return len(cleaned.documents)


def run_benchmark(
    dataset: Path,
    workdir: Path,
    dense_encoder: DenseEncoder,
    sparse_encoder: SparseEncoder,
    settings: PipelineSettings,
    reranker: Reranker | None = None,
    progress: ProgressFactory = lambda _: None,
) -> dict[str, Any]:
    source = CatalogSource(format="beir", path=str(dataset))
    gold = load_gold(dataset)
    layout = pipeline.IndexLayout(workdir / "indexes")

    started = time.perf_counter()
    documents = build_indexes(source, layout, dense_encoder, sparse_encoder, settings, progress)
    build_seconds = time.perf_counter() - started
    # The build's garbage would otherwise be traversed by collections during the timed queries.
    gc.collect()
    gc.freeze()

    retriever = open_retriever(
        layout,
        dense_encoder=dense_encoder,
        sparse_encoder=sparse_encoder,
        settings=settings.retrieval,
        reranker=reranker,
    )
    try:
        encode_p95 = query_encoding_p95_ms(dense_encoder, gold.queries)
        configurations = {name: options for name, options in CONFIGURATIONS.items() if reranker or not options.get("rerank")}
        reports = evaluate_configurations(retriever, gold, configurations, progress=progress)
    finally:
        retriever.close()
    return {
        "dataset": dataset.name,
        "docs": documents,
        "queries": len(gold.queries),
        "build_seconds": round(build_seconds, 2),
        "encode_query_p95_ms": round(encode_p95, 2),
        "runs": {name: summarize(report) for name, report in reports.items()},
        "default": DEFAULT_CONFIGURATION,
    }


def summarize(report: EvaluationReport) -> dict[str, float]:
    m = report.metrics
    return {
        "ndcg@10": round(m["ndcg@10"], 4),
        "recall@100": round(m["recall@100"], 4),
        "mrr@10": round(m["mrr@10"], 4),
        "p50_ms": round(m["p50_ms"], 2),
        "p95_ms": round(m["p95_ms"], 2),
    }


def ndcg_histogram(report: EvaluationReport, bins: int = 5) -> list[tuple[str, int]]:
    """Per-query nDCG@10 counted in equal-width bins, for a quick look at the score distribution."""
    counts, edges = np.histogram([q.ndcg_at_10 for q in report.per_query], bins=bins, range=(0.0, 1.0))
    return [(f"{edges[i]:.1f}-{edges[i + 1]:.1f}", int(c)) for i, c in enumerate(counts)]
