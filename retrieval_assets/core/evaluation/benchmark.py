"""Build any BEIR directory in a scratch location and evaluate each retrieval configuration.

It uses exactly the pipeline steps the Dagster assets use, so its figures describe the product.
"""

from __future__ import annotations

import gc
import gzip
import json
import resource
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrieval_assets.core.embed.base import ProgressFactory
from retrieval_assets.core.ingest.catalog import CatalogSource, GoldSet, catalog_file, load_gold
from retrieval_assets.core.embed.cache import content_hash
from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.evaluation.metrics import EvaluationReport, evaluate, latency_percentiles
from retrieval_assets.core.retrieval.rerank.base import Reranker
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.retrieval.searcher import open_retriever
from retrieval_assets.core.settings import PipelineSettings
from retrieval_assets.core.index.versions import IndexVersions

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

    started = time.perf_counter()
    build = build_candidate(
        source, IndexVersions(workdir / "indexes"), workdir / "cache", dense_encoder, sparse_encoder, settings, progress
    )
    build_seconds = time.perf_counter() - started
    layout = build.version.layout
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
        "docs": build.documents,
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


# Fields of a catalog record that hold its main text, by catalog format.
_TEXT_FIELD = {"beir": "text", "tool_catalog": "description"}


def change_documents(corpus: Path, target: Path, text_field: str, fraction: float) -> int:
    """Copy ``corpus`` (JSONL, optionally gzipped) to ``target`` with the text of ``fraction`` of
    its records changed; the records are picked by a hash of their line, so the pick is stable
    and spread over the file. Returns how many records changed."""
    threshold = int(fraction * 2**32)
    changed = 0
    with _open_text(corpus) as lines, target.open("w", encoding="utf-8") as out:
        for line in lines:
            if int(content_hash(line)[:8], 16) < threshold:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    record = None
                if isinstance(record, dict):
                    record[text_field] = f"{record.get(text_field) or ''} Revised for the incremental benchmark."
                    line = json.dumps(record) + "\n"
                    changed += 1
            out.write(line)
    return changed


def _open_text(path: Path) -> Any:
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def run_incremental_benchmark(
    dataset: Path,
    catalog_format: str,
    workdir: Path,
    dense_encoder: DenseEncoder,
    sparse_encoder: SparseEncoder,
    settings: PipelineSettings,
    changed_fraction: float = 0.01,
    progress: ProgressFactory = lambda _: None,
) -> dict[str, Any]:
    """A full build, a re-run with no change, and a re-run with ``changed_fraction`` of the
    documents changed, each timed from reading the catalog to a sealed version."""
    corpus = catalog_file(dataset, catalog_format)
    catalog_dir = workdir / "catalog"
    catalog_dir.mkdir(parents=True, exist_ok=True)
    # The working copy keeps the layout the format expects: a BEIR directory or a JSONL file.
    working = catalog_dir / ("corpus.jsonl" if catalog_format == "beir" else "catalog.jsonl")
    change_documents(corpus, working, _TEXT_FIELD[catalog_format], fraction=0.0)
    source = CatalogSource(format=catalog_format, path=str(catalog_dir if catalog_format == "beir" else working))
    versions, cache = IndexVersions(workdir / "indexes"), workdir / "cache"

    def timed_build() -> tuple[float, Any]:
        started = time.perf_counter()
        result = build_candidate(source, versions, cache, dense_encoder, sparse_encoder, settings, progress)
        return time.perf_counter() - started, result

    full_seconds, full = timed_build()
    full_peak_rss_mb = peak_rss_mb()
    noop_seconds, noop = timed_build()
    changed = change_documents(corpus, working, _TEXT_FIELD[catalog_format], changed_fraction)
    one_percent_seconds, one_percent = timed_build()
    return {
        "dataset": dataset.name,
        "documents": full.documents,
        "chunks": full.chunks,
        "changed_documents": changed,
        "full_stages": full.seconds,
        "one_percent_stages": one_percent.seconds,
        "noop_reused_version": noop.reused,
        "noop_ratio": round(noop_seconds / full_seconds, 4),
        "one_percent_ratio": round(one_percent_seconds / full_seconds, 4),
        "full_seconds": round(full_seconds, 2),
        "noop_seconds": round(noop_seconds, 2),
        "one_percent_seconds": round(one_percent_seconds, 2),
        "peak_rss_mb": round(full_peak_rss_mb, 1),
        "reembedded_chunks_noop": noop.reembedded_chunks(),
        "reembedded_chunks_one_percent": one_percent.reembedded_chunks(),
    }


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
