"""``retrieval-assets bench-latency``: query P50/P95 per backend (bm25, dense, splade, hybrid) over
one built version."""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from retrieval_assets.bench.loadtest import load_queries
from retrieval_assets.bench.report import emit_figures, peak_rss_mb, tqdm_progress
from retrieval_assets.core.embed.base import DenseEncoder, ProgressFactory
from retrieval_assets.core.embed.configured import dense_encoder_for, sparse_encoder_for
from retrieval_assets.core.evaluation.benchmark import CONFIGURATIONS
from retrieval_assets.core.evaluation.metrics import latency_percentiles
from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.retrieval.service import open_retriever
from retrieval_assets.core.settings import PipelineSettings


def bench_latency(index_root: Path, version_id: str | None, queries_file: str | None, json_out: str | None) -> int:
    """Query P50/P95 per backend over ``version_id`` (default: the newest complete version under
    ``index_root``); the last stdout line is the JSON figures."""
    versions = IndexVersions(index_root)
    sealed = versions.sealed()
    version = versions.version(version_id) if version_id else (sealed[-1] if sealed else None)
    if version is None or not version.sealed:
        print(f"bench-latency: no complete index version {version_id or ''} under {index_root}", file=sys.stderr)
        return 2
    queries = load_queries(queries_file)
    settings = PipelineSettings()
    retriever = open_retriever(
        version.layout,
        dense_encoder=dense_encoder_for(settings.models),
        sparse_encoder=sparse_encoder_for(settings.models),
        settings=settings.retrieval,
    )
    gc.collect()
    gc.freeze()  # as a serving process: loading garbage is not traversed during the timed queries
    try:
        runs = latency_by_configuration(retriever, queries, progress=tqdm_progress)
    finally:
        retriever.close()
    figures = {
        "version": version.id,
        "chunks": version.manifest().get("chunks"),
        "queries": len(queries),
        "runs": runs,
        "peak_rss_mb": round(peak_rss_mb(), 1),  # the models plus every open index: what serving holds
    }
    emit_figures(figures, json_out)
    return 0


def query_encoding_p95_ms(encoder: DenseEncoder, queries: Mapping[str, str]) -> float:
    """Dense query encoding alone, one query at a time: the floor end-to-end latency is judged against."""
    latencies = []
    for text in queries.values():
        started = time.perf_counter()
        encoder.encode_queries([text])
        latencies.append((time.perf_counter() - started) * 1000)
    return latency_percentiles(latencies)["p95_ms"]


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
