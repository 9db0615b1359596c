"""Retrieval configurations the evaluation measures, and how their reports are evaluated and summarised.

The bench commands (``retrieval_assets/bench/``) measure the same configurations; nothing here
builds an index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from retrieval_assets.core.embed.base import ProgressFactory
from retrieval_assets.core.evaluation.metrics import EVAL_DEPTH, EvaluationReport, evaluate
from retrieval_assets.core.ingest.catalog import GoldSet
from retrieval_assets.core.retrieval.retriever import HybridRetriever

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


def evaluate_configurations(
    retriever: HybridRetriever,
    gold: GoldSet,
    configurations: Mapping[str, Mapping[str, Any]] = CONFIGURATIONS,
    progress: ProgressFactory = lambda _: None,
    tenants: Sequence[str] | None = None,
) -> dict[str, EvaluationReport]:
    """Each configuration's report on ``gold``. With ``tenants`` (the gold's scope,
    ``scope.gold_scope``), every query is searched among those tenants' documents only, as a caller
    granted them would search: what other tenants hold cannot enter the result lists."""
    scope: dict[str, Any] = {"tenants": list(tenants)} if tenants is not None else {}
    reports = {}
    for name, options in configurations.items():
        def search(query: str, options: Mapping[str, Any] = options) -> list[str]:
            return [hit.doc_id for hit in retriever.search(query, top_k=EVAL_DEPTH, **scope, **options).hits]

        reports[name] = evaluate(search, gold.queries, gold.qrels, progress=progress(f"eval {name}"))
    return reports


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
