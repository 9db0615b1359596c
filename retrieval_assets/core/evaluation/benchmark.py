"""Retrieval configurations the evaluation measures, and the pure helpers of the bench commands.

The bench commands themselves (``retrieval_assets/bench.py``) build and evaluate through the
product's asset graph; nothing here builds an index.
"""

from __future__ import annotations

import gzip
import json
import resource
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrieval_assets.core.embed.base import DenseEncoder, ProgressFactory
from retrieval_assets.core.embed.cache import content_hash
from retrieval_assets.core.evaluation.metrics import EVAL_DEPTH, EvaluationReport, evaluate, latency_percentiles
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


# Fields of a catalog record that hold its main text, by catalog format.
TEXT_FIELD = {"beir": "text", "tool_catalog": "description"}


def change_documents(
    corpus: Path, target: Path, text_field: str, fraction: float, round_: int = 0, limit: int | None = None
) -> int:
    """Copy ``corpus`` (JSONL, optionally gzipped) to ``target`` with the text of ``fraction`` of
    its records (at most ``limit``) changed; the records are picked by a hash of their line and
    ``round_``, so the pick is stable, spread over the file, and differs from round to round.
    ``target`` may be ``corpus``. Returns how many records changed."""
    threshold = int(fraction * 2**32)
    changed = 0
    written = target.with_name(target.name + ".tmp")
    with _open_text(corpus) as lines, written.open("w", encoding="utf-8") as out:
        for line in lines:
            if (limit is None or changed < limit) and int(content_hash(str(round_), line)[:8], 16) < threshold:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    record = None
                if isinstance(record, dict):
                    revision = f"Revised for the incremental benchmark (round {round_})."
                    record[text_field] = f"{record.get(text_field) or ''} {revision}"
                    line = json.dumps(record) + "\n"
                    changed += 1
            out.write(line)
    written.replace(target)
    return changed


def _open_text(path: Path) -> Any:
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


# One configuration per backend (FAISS, qdrant-edge SPLADE, tantivy BM25) and the default fusion.
LATENCY_CONFIGURATIONS = ("bm25", "dense", "splade", "hybrid")


def latency_by_configuration(
    retriever: HybridRetriever,
    queries: Sequence[str],
    names: Sequence[str] = LATENCY_CONFIGURATIONS,
    top_k: int = 10,
    progress: ProgressFactory = lambda _: None,
) -> dict[str, dict[str, float]]:
    """End-to-end query latency (encoding, search, fusion) per configuration, one query at a time."""
    figures = {}
    for name in names:
        report = progress(f"latency {name}")
        latencies = []
        for done, query in enumerate(queries, start=1):
            started = time.perf_counter()
            retriever.search(query, top_k=top_k, **CONFIGURATIONS[name])
            latencies.append((time.perf_counter() - started) * 1000)
            if report is not None:
                report(done, len(queries))
        figures[name] = {k: round(v, 2) for k, v in latency_percentiles(latencies).items()}
    return figures
