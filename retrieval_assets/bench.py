"""``retrieval-assets bench`` and ``bench-incremental``: the product's own jobs on a scratch home.

Both run the asset graph in process (``runs.py``) exactly as a nightly run does, so their figures
describe what users run: the bench builds a BEIR directory and evaluates every configuration
through the evaluation asset; the incremental bench times a full build, a no-change re-run,
partly-changed re-runs rebuilt in full and as deltas, and one changed document, and reports the
embedding cache's segments after each.
"""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import Any

from dagster import DagsterInstance

from retrieval_assets.core.evaluation.benchmark import (
    CONFIGURATIONS,
    TEXT_FIELD,
    change_documents,
    peak_rss_mb,
    query_encoding_p95_ms,
)
from retrieval_assets.core.embed.cache import SEGMENT_GLOB
from retrieval_assets.core.ingest.catalog import catalog_file, load_gold
from retrieval_assets.core.io.files import write_json
from retrieval_assets.defs.resources import CatalogResource, IndexBuildResource
from retrieval_assets.runs import BuildOutcome, build_index, deployment_resources, evaluate_version

# What a full build took and which version it sealed, so ``--resume`` can time re-runs against it.
FULL_BUILD_RECORD = "full_build.json"


class BenchmarkError(RuntimeError):
    """A build or evaluation run of the bench failed; its run log says why."""


def _built(outcome: BuildOutcome) -> BuildOutcome:
    if not outcome.success or outcome.candidate is None or not outcome.candidate.sealed:
        raise BenchmarkError(f"the build run {outcome.run.run_id} did not seal a candidate; see its log above")
    return outcome


def run_benchmark(dataset: Path, workdir: Path, rerank: bool = True) -> dict[str, Any]:
    """Build ``dataset`` (BEIR) under ``workdir`` and evaluate every configuration."""
    gold = load_gold(dataset)
    resources = deployment_resources(workdir, CatalogResource(format="beir", path=str(dataset)))
    instance = DagsterInstance.ephemeral()
    started = time.perf_counter()
    build = _built(build_index(resources, instance))
    build_seconds = time.perf_counter() - started
    # The build's garbage would otherwise be traversed by collections during the timed queries.
    gc.collect()
    gc.freeze()
    encode_p95 = query_encoding_p95_ms(resources["models"].dense_encoder(), gold.queries)
    configurations = [name for name, options in CONFIGURATIONS.items() if rerank or not options.get("rerank")]
    evaluation = evaluate_version(resources, build.candidate.version, instance, configurations)
    report = resources["storage"].versions().version(build.candidate.version).evaluation()
    if report is None:
        raise BenchmarkError(f"the evaluation run {evaluation.run_id} wrote no report; see its log above")
    return {
        "dataset": dataset.name,
        "docs": build.documents,
        "queries": len(gold.queries),
        "build_seconds": round(build_seconds, 2),
        "encode_query_p95_ms": round(encode_p95, 2),
        # ``tuned_cv``: each query scored with the configuration learned on the other folds.
        "runs": report["runs"],
        "default": report["default"],
    }


def cache_segments(home: Path) -> dict[str, int]:
    """Segments per embedding cache (dense, sparse, terms) under ``home``."""
    root = home / "embedding_cache"
    return {kind.name: len(list(kind.glob(f"*/{SEGMENT_GLOB}"))) for kind in sorted(root.iterdir()) if kind.is_dir()}


def run_incremental_benchmark(
    dataset: Path,
    catalog_format: str,
    workdir: Path,
    changed_fraction: float = 0.01,
    changed_runs: int = 1,
    resume: bool = False,
) -> dict[str, Any]:
    """Each build timed from reading the catalog to a sealed version, and promoted (untimed) so
    the next one can be a delta from it: a full build, a re-run with no change, a re-run with
    ``changed_fraction`` of the documents changed and every index rebuilt from cached vectors
    (deltas off), the same share changed again as a delta build, one document changed, then
    ``changed_runs - 1`` more changed re-runs.

    The full build's figures and version are recorded in ``workdir``. With ``resume`` they are
    read back instead of building again (a cold build of a large catalog takes hours): that
    version is promoted and the re-runs are timed against it, changing documents not changed
    by any earlier run, so they are re-embedded rather than found in the cache."""
    corpus = catalog_file(dataset, catalog_format)
    catalog_dir = workdir / "catalog"
    catalog_dir.mkdir(parents=True, exist_ok=True)
    # The working copy keeps the layout the format expects: a BEIR directory or a JSONL file.
    working = catalog_dir / ("corpus.jsonl" if catalog_format == "beir" else "catalog.jsonl")
    change_documents(corpus, working, TEXT_FIELD[catalog_format], fraction=0.0)
    catalog = CatalogResource(format=catalog_format, path=str(catalog_dir if catalog_format == "beir" else working))
    home = workdir / "home"
    resources = deployment_resources(home, catalog)
    rebuild_in_full = deployment_resources(
        home, catalog, resources["models"], build=IndexBuildResource(delta_max_changed_fraction=0.0)
    )
    versions = resources["storage"].versions()
    instance = DagsterInstance.ephemeral()
    # Models are loaded once beforehand, as a long-lived process holds them.
    resources["models"].dense_encoder(), resources["models"].sparse_encoder()

    def timed_build(with_resources: dict[str, Any] = resources) -> tuple[float, BuildOutcome]:
        started = time.perf_counter()
        outcome = _built(build_index(with_resources, instance))
        seconds = time.perf_counter() - started
        # Not timed: what the evaluation gate does for a passing version (the bench measures builds).
        versions.promote(versions.version(outcome.candidate.version), reason="bench-incremental")
        return seconds, outcome

    def changed_build(round_: int, limit: int | None = None, **build: Any) -> dict[str, Any]:
        changed = change_documents(working, working, TEXT_FIELD[catalog_format], changed_fraction, round_, limit)
        seconds, outcome = timed_build(**build)
        return {
            "changed_documents": changed,
            "seconds": round(seconds, 2),
            "ratio": round(seconds / full_seconds, 4),
            "mode": outcome.candidate.mode,
            "reembedded_chunks": outcome.encoded["dense"],
            "stages": outcome.step_seconds,
            "cache_segments": cache_segments(home),
        }

    record_path = workdir / FULL_BUILD_RECORD
    if resume:
        if not record_path.is_file():
            raise BenchmarkError(f"nothing to resume: {record_path} is written by a run without --resume")
        full = json.loads(record_path.read_text())
        versions.promote(versions.version(full["version"]), reason="bench-incremental resumed")
    else:
        seconds, outcome = timed_build()
        full = {
            "version": outcome.candidate.version,
            "seconds": seconds,
            "documents": outcome.documents,
            "chunks": outcome.chunks,
            "stages": outcome.step_seconds,
            "peak_rss_mb": peak_rss_mb(),
            "next_round": 1,
        }
    full_seconds = full["seconds"]
    first = full["next_round"]
    rounds = range(first, first + changed_runs + 2)
    full["next_round"] = rounds.stop
    write_json(full, record_path)
    noop_seconds, noop = timed_build()
    rebuilt = changed_build(rounds[0], with_resources=rebuild_in_full)
    delta = changed_build(rounds[1])
    one_document = changed_build(rounds[2], limit=1)
    more = [changed_build(round_) for round_ in rounds[3:]]
    return {
        "dataset": dataset.name,
        "resumed": resume,
        "full_version": full["version"],
        "documents": full["documents"],
        "chunks": full["chunks"],
        "changed_documents": rebuilt["changed_documents"],
        "full_stages": full["stages"],
        "one_percent_stages": rebuilt["stages"],
        "delta_one_percent_stages": delta["stages"],
        "one_document_stages": one_document["stages"],
        "noop_reused_version": noop.candidate.reused,
        "noop_ratio": round(noop_seconds / full_seconds, 4),
        "one_percent_ratio": rebuilt["ratio"],
        "delta_one_percent_ratio": delta["ratio"],
        "one_document_ratio": one_document["ratio"],
        "full_seconds": round(full_seconds, 2),
        "noop_seconds": round(noop_seconds, 2),
        "one_percent_seconds": rebuilt["seconds"],
        "delta_one_percent_seconds": delta["seconds"],
        "delta_one_percent_mode": delta["mode"],
        "one_document_seconds": one_document["seconds"],
        "one_document_mode": one_document["mode"],
        "peak_rss_mb": round(full["peak_rss_mb"], 1),
        "reembedded_chunks_noop": noop.encoded["dense"],
        "reembedded_chunks_one_percent": rebuilt["reembedded_chunks"],
        "changed_runs": [rebuilt, delta, one_document, *more],
        "cache_segments": cache_segments(home),
    }
