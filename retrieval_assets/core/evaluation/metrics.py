"""Retrieval evaluation against gold queries: IR metrics from pytrec_eval, plus latency."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pytrec_eval
from pydantic import BaseModel

from retrieval_assets.core.embed.base import ProgressCallback

# Cut-offs reported everywhere (bench JSON, asset metadata, eval gates).
RECALL_CUTOFFS = (10, 100)
NDCG_CUTOFF = 10
MRR_CUTOFF = 10
EVAL_DEPTH = max(RECALL_CUTOFFS)  # results judged per query: deep enough for the deepest recall

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Sequence[str]]  # query id -> doc ids, best first


class QueryEvaluation(BaseModel):
    query_id: str
    latency_ms: float
    ndcg_at_10: float
    recall_at_100: float
    mrr_at_10: float


class EvaluationReport(BaseModel):
    queries: int
    metrics: dict[str, float]
    per_query: list[QueryEvaluation]


def _as_scores(docs: Sequence[str]) -> dict[str, float]:
    """pytrec_eval ranks by score: strictly decreasing scores keep our order exactly.

    An empty ranking gets a placeholder so the query still counts, with zero scores.
    """
    return {doc: float(len(docs) - i) for i, doc in enumerate(docs)} or {"__no_result__": 0.0}


def score_run(run: Run, qrels: Qrels) -> dict[str, dict[str, float]]:
    """Per-query ``ndcg@10``, ``recall@k`` and ``mrr@10`` for every judged query in the run."""
    judged = {qid: dict(rel) for qid, rel in qrels.items() if qid in run}
    measures = {f"ndcg_cut.{NDCG_CUTOFF}", *(f"recall.{k}" for k in RECALL_CUTOFFS)}
    per_query = pytrec_eval.RelevanceEvaluator(judged, measures).evaluate(
        {qid: _as_scores(run[qid]) for qid in judged}
    )
    # trec_eval's recip_rank has no cut-off, so truncate the run for MRR@10.
    reciprocal = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank"}).evaluate(
        {qid: _as_scores(run[qid][:MRR_CUTOFF]) for qid in judged}
    )
    return {
        qid: {
            f"ndcg@{NDCG_CUTOFF}": values[f"ndcg_cut_{NDCG_CUTOFF}"],
            **{f"recall@{k}": values[f"recall_{k}"] for k in RECALL_CUTOFFS},
            f"mrr@{MRR_CUTOFF}": reciprocal[qid]["recip_rank"],
        }
        for qid, values in per_query.items()
    }


def latency_percentiles(latencies_ms: Sequence[float]) -> dict[str, float]:
    values = np.asarray(latencies_ms, dtype=float)
    if values.size == 0:
        return {"p50_ms": 0.0, "p95_ms": 0.0}
    return {"p50_ms": float(np.percentile(values, 50)), "p95_ms": float(np.percentile(values, 95))}


def evaluate(
    search: Callable[[str], Sequence[str]],
    queries: Mapping[str, str],
    qrels: Qrels,
    progress: ProgressCallback | None = None,
) -> EvaluationReport:
    """Run every judged query one at a time through ``search`` (returns doc ids, best first)."""
    judged = [qid for qid in queries if qid in qrels]
    if not judged:
        raise ValueError("no query has relevance judgements; check the gold queries and qrels")
    run: dict[str, list[str]] = {}
    latencies: dict[str, float] = {}
    for done, qid in enumerate(judged, start=1):
        started = time.perf_counter()
        run[qid] = list(search(queries[qid]))
        latencies[qid] = (time.perf_counter() - started) * 1000
        if progress is not None:
            progress(done, len(judged))
    per_query = score_run(run, qrels)
    names = next(iter(per_query.values())).keys()
    metrics = {name: float(np.mean([per_query[q][name] for q in judged])) for name in names}
    metrics.update(latency_percentiles(list(latencies.values())))
    return EvaluationReport(
        queries=len(judged),
        metrics=metrics,
        per_query=[
            QueryEvaluation(
                query_id=qid,
                latency_ms=latencies[qid],
                ndcg_at_10=per_query[qid][f"ndcg@{NDCG_CUTOFF}"],
                recall_at_100=per_query[qid]["recall@100"],
                mrr_at_10=per_query[qid][f"mrr@{MRR_CUTOFF}"],
            )
            for qid in judged
        ],
    )
